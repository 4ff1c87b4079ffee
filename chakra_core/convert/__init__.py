"""PyTorch execution traces (+ Kineto) to Chakra ETs: reading, linking, conversion, splitting."""
