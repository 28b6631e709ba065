"""The lines of one split of a text file, exactly as Hadoop's ``LineRecordReader`` gives
them to Spark's text source (pure logic over a binary file object).

Spark reads a line file as splits ``[start, start + length)``; the reader of a split
(Hadoop 3's ``LineRecordReader`` with the default delimiter):

* ends a line at ``\\n``, ``\\r\\n`` or a lone ``\\r``, none of which is part of the line;
* skips everything up to and including the first line end at or after ``start`` unless
  ``start`` is 0 (that line belongs to the split before);
* gives every line that STARTS at or before ``start + length``, reading past the split's
  end for the last one (so a line starting exactly at the boundary is the earlier split's,
  and the later split skips it);
* gives no empty line after the file's last line end;
* drops a UTF-8 byte order mark from the first line of the file (a file of only the mark
  has no line).

``tests/test_pipeline_line_splits.py`` checks this module against Spark's own reader, split
by split.
"""

from __future__ import annotations

import re
from typing import BinaryIO

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_READ_ON = 1 << 16


def read_split(path: str, start: int, length: int) -> list[bytes]:
    """The lines of the split ``[start, start + length)`` of the local file ``path``."""
    with open(path, "rb") as fh:
        return split_lines(fh, start, length)


def split_lines(fh: BinaryIO, start: int, length: int) -> list[bytes]:
    """The lines of the split ``[start, start + length)`` of the file ``fh``."""
    fh.seek(start)
    buf = fh.read(length)
    eof = len(buf) < length
    end = length  # the split's end, relative to start
    while True:
        lines, complete = _lines_of(buf, start == 0, end, eof)
        if complete:
            # A file of only a byte order mark has no line (Hadoop counts the line's
            # bytes without the mark: none, the end of the split).
            return [] if start == 0 and eof and buf == _BOM else lines
        more = fh.read(_READ_ON)
        eof = len(more) < _READ_ON
        buf += more


def _lines_of(buf: bytes, first: bool, end: int, eof: bool) -> tuple[list[bytes], bool]:
    """The split's lines from ``buf`` (the file from the split's start), and whether
    ``buf`` held enough of the file to know them all."""
    if b"\r" not in buf:
        return _lf_lines(buf, first, end, eof)
    # Some "\r": line ends found one by one (rare: files written on Windows or old Macs).
    lines: list[bytes] = []
    pos = 0
    if not first:
        m = _LINE_END.search(buf)
        if m is None or (m.group() == b"\r" and m.end() == len(buf) and not eof):
            return [], eof  # the first line end is further on (or may be "\r\n")
        pos = m.end()
    while pos <= end:
        m = _LINE_END.search(buf, pos)
        if m is None or (m.group() == b"\r" and m.end() == len(buf) and not eof):
            if not eof:
                return [], False
            if pos < len(buf):
                lines.append(buf[pos:])
            break
        lines.append(buf[pos:m.start()])
        pos = m.end()
    return _without_bom(lines, first), True


def _lf_lines(buf: bytes, first: bool, end: int, eof: bool) -> tuple[list[bytes], bool]:
    """``_lines_of`` for a text without "\\r": split at "\\n" only."""
    begin = 0
    if not first:
        newline = buf.find(b"\n")
        if newline < 0:
            return [], eof
        begin = newline + 1
        if begin > end:
            return [], True
    # The last line the split gives starts after the last "\n" before its end.
    last_start = max(buf.rfind(b"\n", begin, end) + 1, begin)
    stop = buf.find(b"\n", last_start)
    if stop < 0:
        if not eof:
            return [], False
        if last_start == len(buf):  # the file ends with a line end: no line after it
            stop = last_start - 1
            if stop < begin:
                return [], True
        else:
            stop = len(buf)
    return _without_bom(buf[begin:stop].split(b"\n"), first), True


def _without_bom(lines: list[bytes], first: bool) -> list[bytes]:
    if first and lines and lines[0].startswith(_BOM):
        lines[0] = lines[0][len(_BOM):]
    return lines
