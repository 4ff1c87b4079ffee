"""The profiler's XPlane protobuf (`<host>.xplane.pb`), read with protobuf and a schema of our
own: the messages and field numbers below are the public format (XSpace, XPlane, XLine,
XEvent, XStat and their metadata), built into classes at import, so no TensorFlow, xprof or
generated code is needed.

An event's time is its line's `timestamp_ns` plus its `offset_ps`; its name is its metadata's;
stats give a value of one of several kinds, or (`ref_value`) the name of another stat
metadata, as strings are interned.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from chakra_core.convert.jax.profile import Event, Profile, read_profile_file, time_error
from chakra_core.errors import SourceFormatError

_T = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _DOUBLE, _STRING, _BYTES, _MESSAGE = (_T.TYPE_INT64, _T.TYPE_UINT64, _T.TYPE_DOUBLE, _T.TYPE_STRING,
                                                       _T.TYPE_BYTES, _T.TYPE_MESSAGE)
# message -> (field name, number, type, message type or None, repeated)
_MESSAGES = {
    "XSpace": [("planes", 1, _MESSAGE, "XPlane", True), ("errors", 2, _STRING, None, True),
               ("warnings", 3, _STRING, None, True), ("hostnames", 4, _STRING, None, True)],
    "XPlane": [("id", 1, _INT64, None, False), ("name", 2, _STRING, None, False),
               ("lines", 3, _MESSAGE, "XLine", True), ("event_metadata", 4, _MESSAGE, "XPlane.EventMetadataEntry", True),
               ("stat_metadata", 5, _MESSAGE, "XPlane.StatMetadataEntry", True),
               ("stats", 6, _MESSAGE, "XStat", True)],
    "XPlane.EventMetadataEntry": [("key", 1, _INT64, None, False), ("value", 2, _MESSAGE, "XEventMetadata", False)],
    "XPlane.StatMetadataEntry": [("key", 1, _INT64, None, False), ("value", 2, _MESSAGE, "XStatMetadata", False)],
    "XLine": [("id", 1, _INT64, None, False), ("display_id", 10, _INT64, None, False), ("name", 2, _STRING, None, False),
              ("display_name", 11, _STRING, None, False), ("timestamp_ns", 3, _INT64, None, False),
              ("duration_ps", 9, _INT64, None, False), ("events", 4, _MESSAGE, "XEvent", True)],
    "XEvent": [("metadata_id", 1, _INT64, None, False), ("offset_ps", 2, _INT64, None, False),
               ("num_occurrences", 5, _INT64, None, False), ("duration_ps", 3, _INT64, None, False),
               ("stats", 4, _MESSAGE, "XStat", True)],
    "XStat": [("metadata_id", 1, _INT64, None, False), ("double_value", 2, _DOUBLE, None, False),
              ("uint64_value", 3, _UINT64, None, False), ("int64_value", 4, _INT64, None, False),
              ("str_value", 5, _STRING, None, False), ("bytes_value", 6, _BYTES, None, False),
              ("ref_value", 7, _UINT64, None, False)],
    "XEventMetadata": [("id", 1, _INT64, None, False), ("name", 2, _STRING, None, False),
                       ("display_name", 4, _STRING, None, False), ("metadata", 3, _BYTES, None, False),
                       ("stats", 5, _MESSAGE, "XStat", True), ("child_id", 6, _INT64, None, True)],
    "XStatMetadata": [("id", 1, _INT64, None, False), ("name", 2, _STRING, None, False),
                      ("description", 3, _STRING, None, False)],
}
_ONEOF = {"XEvent": ("data", ("offset_ps", "num_occurrences")),
          "XStat": ("value", ("double_value", "uint64_value", "int64_value", "str_value", "bytes_value", "ref_value"))}
_PACKAGE = "chakra_xplane"


def _space_class():
    """The XSpace message class, built from _MESSAGES (map fields as their entry messages)."""
    file = descriptor_pb2.FileDescriptorProto(name="chakra_xplane.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES.items():
        outer, _, entry = name.partition(".")
        if entry:
            parent = next(m for m in file.message_type if m.name == outer)
            message = parent.nested_type.add(name=entry)
            message.options.map_entry = True
        else:
            message = file.message_type.add(name=name)
        oneof = _ONEOF.get(name)
        if oneof:
            message.oneof_decl.add(name=oneof[0])
        for field_name, number, kind, type_name, repeated in fields:
            field = message.field.add(name=field_name, number=number, type=kind,
                                      label=_T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if oneof and field_name in oneof[1]:
                field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.XSpace"))


XSpace = _space_class()


def _stat_value(stat, names: dict[int, str]) -> str:
    kind = stat.WhichOneof("value")
    if kind is None:
        return ""
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    if kind == "bytes_value":
        return stat.bytes_value.hex()
    return str(getattr(stat, kind))


def read_xplane(path: str) -> Profile:
    """Every event of every plane (times in ns), with its stats (and its metadata's) as args."""
    data = read_profile_file(path, "an XPlane file")
    space = XSpace()
    try:
        space.ParseFromString(data)
    except DecodeError as exc:
        raise SourceFormatError(path, f"not an XPlane protobuf (truncated or corrupt: {exc})") from None
    if not space.planes:
        raise SourceFormatError(path, "an XPlane file without planes (not a profile?)")
    events = []
    for plane in space.planes:
        stat_names = {key: m.name for key, m in plane.stat_metadata.items()}
        for line in plane.lines:
            line_name = line.display_name or line.name
            for index, event in enumerate(line.events):
                meta = plane.event_metadata.get(event.metadata_id)
                name = (meta.display_name or meta.name) if meta is not None else str(event.metadata_id)
                start_ps = line.timestamp_ns * 1000 + event.offset_ps  # exact integers, checked before floats
                problem = time_error(start_ps // 1000, event.duration_ps / 1000)
                if problem:
                    raise SourceFormatError(path, f"plane {plane.name!r:.60} line {line_name!r:.60} event {index}"
                                            f" {name!r:.60} (timestamp_ns {line.timestamp_ns} + offset_ps"
                                            f" {event.offset_ps}, duration_ps {event.duration_ps}) {problem}")
                args = {stat_names.get(s.metadata_id, str(s.metadata_id)): _stat_value(s, stat_names)
                        for s in (*(meta.stats if meta is not None else ()), *event.stats)}
                events.append(Event(name, start_ps / 1000, event.duration_ps / 1000, args, plane.name, line_name))
    return Profile(path, events, "xplane")
