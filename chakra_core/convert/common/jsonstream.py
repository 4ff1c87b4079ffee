"""Stream one large JSON document whose bulk is a single array, in bounded batches.

A PyTorch execution trace is `{"schema": ..., "nodes": [ ...hundreds of thousands... ],
"finish_ts": ...}` and a Kineto trace is `{..., "traceEvents": [...]}`. `json.load` of such a
file holds the whole document as Python objects (about ten times the file size). Here a C
scanner (chakra_core/_native/jsonscan.c) finds where the array's elements end, and orjson
parses a batch of whole elements at a time from the read buffer, so memory stays at one
read chunk plus one batch of objects. Gzip is detected by its magic bytes; any fsspec URL.

Errors name the file and the byte offset (in the uncompressed stream) and, inside the
array, the index of the element. Input beyond chakra_core.limits is refused as it streams
past: nesting deeper than `json_depth` (the scanner stops at the bracket, before a parser
could recurse into it) and arrays longer than `nodes`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import orjson

from chakra_core import limits
from chakra_core._native import _jsonscan
from chakra_core.convert.common.collector import collector_paused
from chakra_core.errors import ChakraFormatError
from chakra_core.format.etfile import READ_ERRORS, open_binary

READ_CHUNK = 4 << 20
BATCH_ITEMS = 4096


class TraceJSONError(ChakraFormatError):
    """A JSON trace file that cannot be read: not JSON, truncated, or not the expected shape."""

    def __init__(self, path: str, message: str, offset: int | None = None, element: int | None = None,
                 node_id: int | None = None):
        self.element = element
        super().__init__(path, message if element is None else f"element {element}: {message}", offset,
                         node_index=element, node_id=node_id)


def too_deep(path: str, offset: int, element: int | None = None) -> limits.LimitExceeded:
    """JSON nested deeper than the json_depth limit; `offset`: the bracket that goes too deep."""
    where = f"{path}: byte {offset}" + (f": element {element}" if element is not None else "")
    return limits.LimitExceeded(where, "json_depth", "JSON nested too deeply")


def check_depth(data, path: str) -> None:
    """Refuse a whole JSON document (read at once) nested deeper than the json_depth limit."""
    try:
        _jsonscan.value_end(data, 0, limits.value("json_depth"))
    except _jsonscan.TooDeep as exc:
        raise too_deep(path, exc.args[1]) from None
    except _jsonscan.ScanError as exc:
        raise TraceJSONError(path, f"malformed JSON: {exc.args[0]}", exc.args[1]) from None


def parse_json(data, path: str = "<json>", offset: int = 0, element: int | None = None):
    """orjson, falling back to the json module for the NaN/Infinity tokens orjson refuses."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(bytes(data))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        at = getattr(exc, "pos", 0) or 0
        raise TraceJSONError(path, f"malformed JSON: {getattr(exc, 'msg', exc)}", offset + at, element) from None
    except RecursionError:  # only with json_depth raised past what the parsers can nest
        raise TraceJSONError(path, "nested too deeply for the JSON parser", offset, element) from None


class StreamedDocument:
    """A top-level JSON object read once, front to back.

    `batches()` yields lists of the elements of `array_key`, at most `batch_items` at a time;
    every other top-level member lands in `fields` as it is passed (members after the array
    are there once `batches()` is exhausted). `progress(file_bytes_read)` is called per batch
    (compressed bytes for gzip, so it can be compared with the file size). `decode(buf, start,
    end, first_element)`, if given, replaces JSON parsing: buf[start:end] is the batch as a
    JSON array ('[' ... ']'), valid only during the call, and what it returns is yielded.
    `walk(buf, pos, end, max_items, max_depth, first_element)`, if given, is tried first: a
    digest that finds the elements itself in buf[pos:end] (as _jsonscan.scan_array would, see
    jsonscan.h's walk_elements), so that each byte is read once, returning (items, next_pos,
    closed), or None when it cannot start yet. It stops before an element it cannot digest; that
    one is then scanned and decoded as before (which words any error), and walking resumes after.
    """

    def __init__(self, url: str, array_key: str, *, batch_items: int = BATCH_ITEMS,
                 progress: Callable[[int], None] | None = None,
                 decode: Callable[[bytearray, int, int, int], object] | None = None,
                 walk: Callable[[bytearray, int, int, int, int, int], tuple[int, int, bool] | None] | None = None):
        self.url = url
        self.decode = decode
        self.walk = walk
        self.array_key = array_key
        self.batch_items = batch_items
        self.progress = progress
        self.fields: dict = {}
        self.array_seen = False
        self.elements = 0
        # nesting allowed inside a top-level member's value and inside an element of the
        # array: the document's object and the array are levels of their own
        depth = limits.value("json_depth")
        self.member_depth, self.element_depth = depth - 1, depth - 2
        self._max_elements = limits.value("nodes")
        self._max_element_bytes = limits.value("element_bytes")
        # _buf[:_end] holds the stream from offset _base; the rest of _buf is room that reads
        # fill in place (a buffer kept, not one made per read: fresh memory costs page faults)
        self._buf = bytearray()
        self._end = 0
        self._base = 0  # stream offset of _buf[0]
        self._eof = False
        self._file = None

    # -- buffer management ------------------------------------------------------------
    def _fill(self) -> bool:
        """Append one chunk; False at end of stream."""
        if self._eof:
            return False
        room = max(2 * READ_CHUNK, self._end + READ_CHUNK)  # more than twice a chunk only for a long element
        if len(self._buf) < room:
            self._buf.extend(bytes(room - len(self._buf)))
        try:
            with memoryview(self._buf) as view, view[self._end:] as room:
                n = self._file.readinto(room)
        except READ_ERRORS as exc:
            raise TraceJSONError(self.url, f"cannot read: {exc}", self._base + self._end) from None
        if not n:
            self._eof = True
            return False
        self._end += n
        return True

    def _discard(self, upto: int) -> None:
        """Drop the consumed bytes before `upto`."""
        if upto > 0:
            with memoryview(self._buf) as view:
                view[:self._end - upto] = view[upto:self._end]
            self._end -= upto
            self._base += upto

    def stream_offset(self, buffer_position: int) -> int:
        """The offset in the (uncompressed) stream of a position in the buffer `decode` sees."""
        return self._base + buffer_position

    def _raw_position(self) -> int:
        """Bytes of the file (compressed, for gzip) read so far, for progress against its size."""
        raw = getattr(self._file, "fileobj", None) or self._file
        try:
            return raw.tell()
        except (OSError, AttributeError, ValueError):
            return self._base + self._end

    def _skip_space(self, pos: int) -> int:
        while True:
            buf, end = self._buf, self._end
            while pos < end and buf[pos] in b" \t\r\n":
                pos += 1
            if pos < end or not self._fill():
                return pos

    def _expect(self, pos: int, chars: bytes, what: str) -> int:
        pos = self._skip_space(pos)
        if pos >= self._end:
            raise self._truncated(what)
        if self._buf[pos] not in chars:
            found = bytes(self._buf[pos:pos + 20]).decode("utf-8", "replace")
            raise TraceJSONError(self.url, f"expected {what}, found {found!r}", self._base + pos)
        return pos

    def _value(self, pos: int):
        """Parse the value at pos; returns (value, position after it)."""
        pos = self._skip_space(pos)
        while True:
            try:
                end = _jsonscan.value_end(self._buf, pos, self.member_depth, self._end)
            except _jsonscan.TooDeep as exc:
                raise too_deep(self.url, self._base + exc.args[1]) from None
            except _jsonscan.ScanError as exc:
                raise TraceJSONError(self.url, "expected a JSON value", self._base + exc.args[1]) from None
            if end >= 0 and (end < self._end or self._eof):
                return parse_json(memoryview(self._buf)[pos:end], self.url, self._base + pos), end
            self._check_element_size(pos)
            if not self._fill():
                if end >= 0:
                    continue
                raise self._truncated("a complete value")

    def _check_element_size(self, start: int) -> None:
        """One element still incomplete after this many bytes is refused before it fills memory."""
        if self._end - start > self._max_element_bytes:
            raise limits.LimitExceeded(self.url, "element_bytes", f"an element at byte {self._base + start:,} "
                                       f"(element {self.elements}) runs past {self._end - start:,} bytes")

    def _truncated(self, what: str) -> TraceJSONError:
        inside = f" inside {self.array_key!r} after {self.elements} elements" if self.array_seen and self.elements else ""
        return TraceJSONError(self.url, f"file ends early (truncated?): expected {what}{inside}",
                              self._base + self._end)

    # -- the document -----------------------------------------------------------------
    def digest_all(self) -> None:
        """Reads the whole document for what `decode` keeps, the cyclic garbage collector paused:
        a digest makes many short-lived containers, and collecting them only slows it down."""
        try:
            with collector_paused():
                for _ in self.batches():
                    pass
        finally:
            # a decoder is mostly its reader's method, and the reader refers to this document:
            # let go of it, so that what the reader kept is freed as soon as the caller lets go
            # of that, not at a later pass of the collector (paused through a conversion)
            self.decode = self.walk = None

    def batches(self) -> Iterator[list]:
        with open_binary(self.url) as f:
            self._file = f
            try:
                yield from self._walk_object()
            finally:
                self._file = None
                self._buf, self._end = bytearray(), 0
        if not self.array_seen:
            raise TraceJSONError(self.url, f"no {self.array_key!r} array in the top-level object")

    def _walk_object(self) -> Iterator[list]:
        pos = self._expect(0, b"{", "a JSON object ('{')") + 1
        pos = self._skip_space(pos)
        if pos < self._end and self._buf[pos] == ord("}"):
            self._expect_end(pos)
            return
        while True:
            pos = self._expect(pos, b'"', "a member name")
            key, pos = self._value(pos)
            if key in self.fields or (key == self.array_key and self.array_seen):  # which one is meant?
                raise TraceJSONError(self.url, f"the member {key!r} appears twice", self._base + pos)
            pos = self._expect(pos, b":", "':'") + 1
            if key == self.array_key:
                pos = self._expect(pos, b"[", f"an array for {key!r}") + 1
                self.array_seen = True
                pos = yield from self._walk_array(pos)
            else:
                self.fields[key], pos = self._value(pos)
            pos = self._expect(pos, b",}", "',' or '}'")
            if self._buf[pos] == ord("}"):
                self._expect_end(pos)
                return
            self._discard(pos + 1)
            pos = 0

    def _expect_end(self, pos: int) -> None:
        """Only white space may follow the document's closing '}' at pos: a second document
        (`cat a b > c`) or other data is refused at its offset, not ignored."""
        pos += 1
        while True:
            buf, end = self._buf, self._end
            while pos < end and buf[pos] in b" \t\r\n":
                pos += 1
            if pos < end:
                raise TraceJSONError(self.url, "data after the end of the JSON document (a second document?)",
                                     self._base + pos)
            self._discard(pos)
            pos = 0
            if not self._fill():
                return

    def _count(self, items: int) -> None:
        """Refuse an array longer than the nodes limit once `items` more elements are found."""
        if self.elements + items > self._max_elements:
            raise limits.LimitExceeded(self.url, "nodes", f"more than {self._max_elements:,} elements in"
                                                          f" {self.array_key!r}")

    def _walk_array(self, pos: int) -> Iterator[list]:
        """Yield batches of elements; `pos` is just after '['. Returns the position after ']'."""
        while True:
            walked = self.walk and self.walk(self._buf, pos, self._end, self.batch_items, self.element_depth,
                                             self.elements)
            if walked and (walked[0] or walked[2]):
                (items, next_pos, closed), batch = walked, None
                self._count(items)
            else:
                items, next_pos, closed, batch = self._scan_batch(pos)
            if items:
                self.elements += items
                yield batch
                if self.progress:
                    self.progress(self._raw_position())
            if closed:
                return next_pos
            if items:
                self._discard(next_pos - 1)  # keep the ',' before the next element: it becomes '['
                pos = 1
                continue
            self._check_element_size(pos)
            if not self._fill():
                raise self._truncated(f"the rest of {self.array_key!r}")

    def _scan_batch(self, pos: int) -> tuple[int, int, bool, object]:
        """The complete elements from pos (up to batch_items) scanned, then decoded or parsed as
        one array: (items, next_pos, closed, what was decoded)."""
        try:
            items, last_end, next_pos, closed = _jsonscan.scan_array(self._buf, pos, self.batch_items,
                                                                     self.element_depth, self._end)
        except _jsonscan.TooDeep as exc:
            raise too_deep(self.url, self._base + exc.args[1], self.elements + exc.args[2]) from None
        except _jsonscan.ScanError as exc:
            raise TraceJSONError(self.url, f"malformed JSON: {exc.args[0]}", self._base + exc.args[1],
                                 self.elements + exc.args[2]) from None
        self._count(items)
        if not items:
            return items, next_pos, closed, None
        start = pos - 1  # the '[' or ',' before the first element
        self._buf[start] = ord("[")
        self._buf[last_end] = ord("]")
        if self.decode is not None:
            return items, next_pos, closed, self.decode(self._buf, start, last_end + 1, self.elements)
        return items, next_pos, closed, parse_json(memoryview(self._buf)[start:last_end + 1], self.url,
                                                   self._base + start, self.elements)
