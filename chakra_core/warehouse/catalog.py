"""Each warehouse's Iceberg catalog and its tables.

The catalog is pyiceberg's SQL catalog. Where it is: `CHAKRA_CATALOG_URI` (a SQLAlchemy URL:
`sqlite:////path/catalog.sqlite` on one machine, `postgresql://...` for a cluster), else, for a
warehouse on a local disk, the SQLite file `catalog.sqlite` in the warehouse's folder. A
warehouse on object storage needs the variable: the catalog must be one database that every
reader reaches. One database can hold the catalogs of many warehouses: each warehouse's is
named after its URL. Tables are `fleet.<table>`, located at `WAREHOUSE/tables/<table>/`
(metadata/ and data/ below it). Only the driver of a night commits; workers write files.
"""

from __future__ import annotations

import hashlib
import os

import fsspec
import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.inputs import is_local

CATALOG_ENV = "CHAKRA_CATALOG_URI"
CATALOG_FILE = "catalog.sqlite"
NAMESPACE = "fleet"
PARTITION = "date"  # every table of the night is partitioned by its day
# A night's commit appends a manifest: merged into few once there are this many, or a year of
# nights left 365 manifests that every reader's planning opened (0.5-0.75 s a table)
TABLE_PROPERTIES = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "8"}


class CatalogError(ChakraError):
    """The warehouse's catalog cannot be found or opened; one line that says what to set."""


def canonical(warehouse: str) -> str:
    """The warehouse's URL in one spelling (a path, file:// or a trailing slash name one place)."""
    fs, path = fsspec.core.url_to_fs(warehouse)
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    if is_local(fs):
        return "file://" + os.path.abspath(path)
    return f"{protocol}://{path.rstrip('/')}"


def table_location(warehouse: str, table: str) -> str:
    return f"{canonical(warehouse)}/tables/{table}"


def catalog_uri(warehouse: str) -> str | None:
    """The SQLAlchemy URL of the warehouse's catalog; None: a local warehouse without one yet."""
    if os.environ.get(CATALOG_ENV):
        return os.environ[CATALOG_ENV]
    fs, root = fsspec.core.url_to_fs(warehouse)
    if not is_local(fs):
        raise CatalogError(f"{warehouse}: a warehouse on object storage needs its Iceberg catalog: set {CATALOG_ENV} "
                           "to a SQLAlchemy URL that every reader reaches (postgresql://... on a cluster, "
                           "sqlite:////path/catalog.sqlite on one machine)")
    return f"sqlite:///{os.path.join(root, CATALOG_FILE)}"


def file_io_properties(warehouse: str) -> dict[str, str]:
    """pyiceberg reads and writes through fsspec, with s3fs's endpoint and keys as fsspec has them
    (FSSPEC_S3_* variables or fsspec's configuration)."""
    props = {"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}
    s3 = fsspec.config.conf.get("s3", {})
    for key, prop in (("endpoint_url", "s3.endpoint"), ("key", "s3.access-key-id"),
                      ("secret", "s3.secret-access-key")):
        value = s3.get(key) or os.environ.get(f"FSSPEC_S3_{key.upper()}")
        if value:
            props[prop] = value
    return props


def open_catalog(warehouse: str, create: bool = False):
    """The warehouse's catalog; None when a local warehouse has none and `create` is False (a
    reader of an old warehouse, or of one no night has committed to)."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri = catalog_uri(warehouse)
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        if not create and not os.path.exists(path):
            return None
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    name = "chakra-" + hashlib.sha256(canonical(warehouse).encode()).hexdigest()[:16]
    try:
        catalog = SqlCatalog(name, uri=uri, warehouse=canonical(warehouse), **file_io_properties(warehouse))
        if create:
            catalog.create_namespace_if_not_exists(NAMESPACE)
    except Exception as exc:  # SQLAlchemy's many kinds of "cannot connect"
        raise CatalogError(f"{warehouse}: cannot open its catalog {uri}: {' '.join(str(exc).split())[:300]}") from None
    return catalog


def table_names(catalog) -> list[str]:
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        return sorted(identifier[-1] for identifier in catalog.list_tables(NAMESPACE))
    except NoSuchNamespaceError:
        return []


def load(catalog, table: str):
    """The Iceberg table, or None when the catalog has no such table."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(f"{NAMESPACE}.{table}")
    except NoSuchTableError:
        return None


def with_partition(schema: pa.Schema) -> pa.Schema:
    """A declared table's schema as its files store it: its columns, then the day."""
    return schema.append(pa.field(PARTITION, pa.date32(), nullable=False))


def ensure_table(catalog, warehouse: str, table: str, schema: pa.Schema):
    """The Iceberg table for a declaration (`schema`: its columns without the day): created,
    partitioned by day, or evolved to hold columns declared since (older days read them as null)."""
    iceberg = load(catalog, table)
    stored = with_partition(schema)
    if iceberg is None:
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            iceberg = catalog.create_table(f"{NAMESPACE}.{table}", schema=stored,
                                           location=table_location(warehouse, table), properties=TABLE_PROPERTIES)
            with iceberg.update_spec() as spec:
                spec.add_identity(PARTITION)
        except TableAlreadyExistsError:  # another night created it meanwhile
            pass
        return catalog.load_table(f"{NAMESPACE}.{table}")
    if any(iceberg.properties.get(key) != value for key, value in TABLE_PROPERTIES.items()):
        with iceberg.transaction() as tx:  # a table made before these properties
            tx.set_properties(**TABLE_PROPERTIES)
        iceberg = catalog.load_table(f"{NAMESPACE}.{table}")
    known = set(iceberg.schema().column_names)
    if any(name not in known for name in stored.names):
        with iceberg.update_schema() as update:
            update.union_by_name(stored)
        iceberg = catalog.load_table(f"{NAMESPACE}.{table}")
    return iceberg
