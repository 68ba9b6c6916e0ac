"""HPACK (RFC 7541) for both sessions: a bounded decoder, and a stateless encoder.

The decoder keeps the peer's dynamic table and is the one piece of the server whose state must
follow every header block, even blocks of streams that are refused or ignored. Huffman strings
are decoded by the ``hpack`` package's table walker, behind a small cache keyed by the raw
bytes: clients re-send the same values (Go re-encodes ``content-length`` and friends), so a
repeated value costs one dict lookup.

The encoder never indexes (literals without indexing, static-table names): it has no dynamic
table, so no state to keep in step with the peer's SETTINGS_HEADER_TABLE_SIZE.
"""

from __future__ import annotations

from collections import deque

from h2.errors import ErrorCodes
from hpack.exceptions import HPACKDecodingError
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

from nvpair_wm.errors import H2ConnectionError

__all__ = ["DEFAULT_TABLE_SIZE", "Decoder", "encode_field", "encode_fields"]

DEFAULT_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE; we never advertise another value
_STATIC: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE
_STATIC_LEN = len(_STATIC)  # 61
_ENTRY_OVERHEAD = 32  # RFC 7541 §4.1
_MAX_INT = 1 << 32  # no field or index of ours comes near; bounds the integer loop
_HUFFMAN_CACHE_SIZE = 256
_HUFFMAN_CACHE_MAX_RAW = 64  # only short strings are worth remembering
_BLOCKS_REMEMBERED = 16  # repeated header blocks per connection (see Decoder.decode)


def _compression_error(reason: str) -> H2ConnectionError:
    """An undecodable block: a connection error COMPRESSION_ERROR (RFC 9113 §4.3)."""
    return H2ConnectionError(ErrorCodes.COMPRESSION_ERROR, reason)


class Decoder:
    """Decodes header blocks of one connection into ``(name, value)`` byte pairs."""

    __slots__ = (
        "_blocks",
        "_huffman",
        "_size",
        "_table",
        "max_list",
        "max_table_size",
        "table_changes",
    )

    def __init__(self, max_list: int, max_table_size: int = DEFAULT_TABLE_SIZE) -> None:
        self.max_list = max_list  # decoded bytes (RFC 7541 §4.1 sizes) before we give up
        self.max_table_size = max_table_size  # the peer's current table size (its updates)
        self._table: deque[tuple[bytes, bytes]] = deque()  # newest first
        self._size = 0
        self._huffman: dict[bytes, bytes] = {}
        #: Blocks that left the table as it was → their fields, while the table stays so.
        self._blocks: dict[bytes, list[tuple[bytes, bytes]]] = {}
        #: Moves with every change to the dynamic table (or its size): a block decodes the
        #: same while it holds.
        self.table_changes = 0

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The fields of one complete block; the dynamic table is updated as the block says.

        A block that changes nothing in the dynamic table (indexed fields and literals without
        indexing: what a client sends once its table holds the request's fields) decodes the
        same until the table changes, so it is remembered: a repeated block costs one dict
        lookup. The list returned may be such a remembered one: callers must not change it.

        Raises :class:`H2ConnectionError`: COMPRESSION_ERROR for an undecodable block,
        ENHANCE_YOUR_CALM once the decoded list passes ``max_list`` (an HPACK bomb).
        """
        blocks = self._blocks
        if type(block) is bytes:  # (a bytearray is no dict key)
            known = blocks.get(block)
            if known is not None:
                return known
        changes = self.table_changes
        out: list[tuple[bytes, bytes]] = []
        pos = 0
        end = len(block)
        listed = 0
        limit = self.max_list
        fields_seen = False
        while pos < end:
            b = block[pos]
            if b & 0x80:  # indexed field (§6.1)
                index = b & 0x7F
                pos += 1
                if index == 0x7F:
                    index, pos = _integer(block, pos, 0x7F)
                field = self._get(index)
            elif b & 0x40:  # literal with incremental indexing (§6.2.1)
                field, pos = self._literal(block, pos, 0x3F)
                self._add(field)
            elif b & 0x20:  # dynamic table size update (§6.3): only before the first field
                if fields_seen:
                    raise _compression_error("table size update after a field")
                size = b & 0x1F
                pos += 1
                if size == 0x1F:
                    size, pos = _integer(block, pos, 0x1F)
                if size > DEFAULT_TABLE_SIZE:
                    raise _compression_error(f"table size {size} over SETTINGS_HEADER_TABLE_SIZE")
                self.max_table_size = size
                self._evict(size)
                self._changed()
                continue
            else:  # literal without indexing / never indexed (§6.2.2, §6.2.3)
                field, pos = self._literal(block, pos, 0x0F)
            fields_seen = True
            listed += len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD
            if listed > limit:
                raise H2ConnectionError(
                    ErrorCodes.ENHANCE_YOUR_CALM, f"decoded header list over {limit} bytes"
                )
            out.append(field)
        if changes == self.table_changes and type(block) is bytes:
            if len(blocks) >= _BLOCKS_REMEMBERED:
                blocks.clear()
            blocks[block] = out
        return out

    def _literal(self, block: bytes, pos: int, mask: int) -> tuple[tuple[bytes, bytes], int]:
        """A literal field at ``pos`` whose name index has the prefix ``mask`` (0: name follows)."""
        index = block[pos] & mask
        pos += 1
        if index == mask:
            index, pos = _integer(block, pos, mask)
        if index:
            name = self._get(index)[0]
        else:
            name, pos = self._string(block, pos)
        value, pos = self._string(block, pos)
        return (name, value), pos

    def _get(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= _STATIC_LEN:
            return _STATIC[index - 1]
        dyn = index - _STATIC_LEN - 1
        if index == 0 or dyn >= len(self._table):
            raise _compression_error(f"index {index} past both tables")
        return self._table[dyn]

    def _string(self, block: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(block):
            raise _compression_error("block ends before a string")
        huffman = block[pos] & 0x80
        length = block[pos] & 0x7F
        pos += 1
        if length == 0x7F:
            length, pos = _integer(block, pos, 0x7F)
        end = pos + length
        if end > len(block):
            raise _compression_error("string past the end of the block")
        raw = block[pos:end]
        if not huffman:
            return raw, end
        cache = self._huffman
        text = cache.get(raw)
        if text is None:
            try:
                text = decode_huffman(raw)
            except HPACKDecodingError as exc:
                raise _compression_error(f"bad Huffman string: {exc}") from exc
            if length <= _HUFFMAN_CACHE_MAX_RAW:
                if len(cache) >= _HUFFMAN_CACHE_SIZE:
                    cache.clear()
                cache[raw] = text
        return text, end

    def _changed(self) -> None:
        """The dynamic table changed: remembered blocks may read otherwise now."""
        self.table_changes += 1
        self._blocks.clear()

    def _add(self, field: tuple[bytes, bytes]) -> None:
        self._changed()
        size = len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD
        if size > self.max_table_size:  # §4.4: a too-big entry empties the table
            self._table.clear()
            self._size = 0
            return
        self._evict(self.max_table_size - size)
        self._table.appendleft(field)
        self._size += size

    def _evict(self, room: int) -> None:
        table = self._table
        while self._size > room and table:
            name, value = table.pop()
            self._size -= len(name) + len(value) + _ENTRY_OVERHEAD

    @property
    def table_size(self) -> int:
        """Bytes in the dynamic table (RFC 7541 §4.1 sizes)."""
        return self._size

    @property
    def entries(self) -> list[tuple[bytes, bytes]]:
        """The dynamic table, newest first (index 62 first)."""
        return list(self._table)


def _integer(block: bytes, pos: int, value: int) -> tuple[int, int]:
    """Continue an integer whose prefix was all ones (RFC 7541 §5.1); bounded to 2^32."""
    shift = 0
    end = len(block)
    while True:
        if pos >= end:
            raise _compression_error("block ends inside an integer")
        b = block[pos]
        pos += 1
        value += (b & 0x7F) << shift
        if value > _MAX_INT:
            raise _compression_error("integer overflow")
        if not b & 0x80:
            return value, pos
        shift += 7


# -- the response encoder ------------------------------------------------------------------------

_STATIC_NAME: dict[bytes, int] = {}
for _i, (_name, _) in enumerate(_STATIC, start=1):
    _STATIC_NAME.setdefault(_name, _i)
_BLOCK_CACHE_SIZE = 64
_blocks: dict[tuple[tuple[bytes, bytes], ...], bytes] = {}


def _prefixed(value: int, prefix_bits: int, first: int) -> bytes:
    """An integer with an N-bit prefix (RFC 7541 §5.1), ``first`` holding the high bits."""
    mask = (1 << prefix_bits) - 1
    if value < mask:
        return bytes((first | value,))
    out = bytearray((first | mask,))
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """One field as a literal without indexing (§6.2.2), plain (not Huffman) strings."""
    index = _STATIC_NAME.get(name, 0)
    out = _prefixed(index, 4, 0x00)
    if not index:
        out += _prefixed(len(name), 7, 0x00) + name
    return out + _prefixed(len(value), 7, 0x00) + value


def encode_fields(fields: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """The header block of ``fields``; repeated responses come from a small cache."""
    block = _blocks.get(fields)
    if block is None:
        block = b"".join([_literal(name, value) for name, value in fields])
        if len(_blocks) >= _BLOCK_CACHE_SIZE:
            _blocks.clear()
        _blocks[fields] = block
    return block


_STATIC_EXACT: dict[tuple[bytes, bytes], int] = {f: i for i, f in enumerate(_STATIC, start=1)}


def encode_field(name: bytes, value: bytes) -> bytes:
    """One field, uncached: an indexed field for a whole static-table entry, else a literal
    without indexing (the client's request blocks, built once per connection)."""
    index = _STATIC_EXACT.get((name, value))
    if index is not None:
        return _prefixed(index, 7, 0x80)
    return _literal(name, value)
