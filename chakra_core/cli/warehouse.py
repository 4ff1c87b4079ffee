"""`chakra migrate`: a warehouse of one Parquet file per table and day converted into Iceberg
tables (chakra_core/warehouse/migrate.py)."""

from __future__ import annotations

from chakra_core.cli.common import EXIT_BAD_INPUT, EXIT_OK

COMMANDS = {"migrate": "convert a warehouse of one Parquet file per table and day into Iceberg tables, losing nothing"}


def cmd_migrate(args) -> int:
    from chakra_core.warehouse.migrate import migrate

    done = migrate(args.warehouse)
    if not done:
        print(f"{args.warehouse}: nothing to migrate (every table of the old layout is in the catalog already)")
    left = [why for table in done for why in table.left.values()]
    return EXIT_BAD_INPUT if left else EXIT_OK


def add_parsers(sub) -> None:
    p = sub.add_parser("migrate", help=COMMANDS["migrate"],
                       description="Convert every table folder of the old layout (tables/<table>/date=<d>/"
                       "part-0.parquet) into an Iceberg table of the warehouse's catalog: each day's part rewritten "
                       "with its day as a column, all days committed at once, the rows of every day counted back, "
                       "and only then the old folders removed. Ad hoc sweeps' sweep_results stay as they are. A part "
                       "that cannot be read is named and left in place (exit 2). Run it once, with no night running.")
    p.add_argument("--warehouse", default="out/warehouse", metavar="URL",
                   help="the warehouse folder or URL (default out/warehouse)")
    p.set_defaults(run=cmd_migrate)
