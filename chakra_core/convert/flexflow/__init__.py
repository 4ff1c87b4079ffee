"""FlexFlow task graphs (graphviz) to Chakra (graph)."""
