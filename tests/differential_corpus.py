"""Request sequences for the differential test against memcached 1.6.18.

Each sequence is a list of raw requests sent on one connection. `{k}` in a request is replaced by a
key prefix unique to the sequence, so sequences never see each other's items.
"""

from __future__ import annotations

import base64
import itertools

Sequence_ = list[bytes]


def _storage() -> list[Sequence_]:
    out: list[Sequence_] = []
    cmds = [b"set", b"add", b"replace", b"append", b"prepend"]
    for cmd, exists, noreply in itertools.product(cmds, (False, True), (False, True)):
        seq: Sequence_ = []
        if exists:
            seq.append(b"set {k}a 7 0 3\r\nold\r\n")
        nr = b" noreply" if noreply else b""
        seq.append(cmd + b" {k}a 5 0 3" + nr + b"\r\nnew\r\n")
        seq.append(b"get {k}a\r\n")
        out.append(seq)
    for flags in (b"0", b"4294967295", b"4294967296", b"-1", b"abc", b"1.5"):
        out.append([b"set {k}f " + flags + b" 0 1\r\nx\r\n", b"get {k}f\r\n"])
    for exptime in (b"0", b"-1", b"100", b"2592000", b"abc", b"99999999999999999999"):
        out.append([b"set {k}e 0 " + exptime + b" 1\r\nx\r\n", b"get {k}e\r\n"])
    for length in (b"0", b"-1", b"abc", b"2", b"00001"):
        out.append([b"set {k}l 0 0 " + length + b"\r\nx\r\n", b"get {k}l\r\n"])
    out.append(
        [
            b"set {k}z 0 0 0\r\n\r\n",
            b"get {k}z\r\n",
            b"append {k}z 0 0 2\r\nab\r\n",
            b"get {k}z\r\n",
        ]
    )
    out.append([b"set {k}d 0 0 3\r\nabcd\r\n", b"get {k}d\r\n"])
    out.append([b"set {k}d 0 0 3\r\nab\r\n\r\n", b"get {k}d\r\n"])
    out.append([b"set {k}d 0 0 3\r\nabc\n", b"get {k}d\r\n"])
    out.append([b"set {k}n 0 0 1 noreply extra\r\nx\r\n", b"get {k}n\r\n"])
    out.append([b"set {k}n 0 0\r\n", b"get {k}n\r\n"])
    out.append([b"set {k}n 0 0 1 2 3 4\r\nx\r\n", b"get {k}n\r\n"])
    out.append([b"set\r\n", b"set {k}\r\n"])
    out.append([b"set " + b"k" * 250 + b" 0 0 1\r\nx\r\n", b"get " + b"k" * 250 + b"\r\n"])
    out.append([b"set " + b"k" * 251 + b" 0 0 1\r\nx\r\n"])
    out.append([b"SET {k}u 0 0 1\r\nx\r\n", b"GET {k}u\r\n"])
    # cas
    out.append([b"cas {k}c 0 0 1 1\r\nx\r\n"])
    out.append([b"set {k}c 0 0 1\r\nx\r\n", b"cas {k}c 0 0 1 999999\r\ny\r\n", b"get {k}c\r\n"])
    out.append([b"set {k}c 0 0 1\r\nx\r\n", b"cas {k}c 0 0 1\r\ny\r\n"])
    out.append([b"set {k}c 0 0 1\r\nx\r\n", b"cas {k}c 0 0 1 abc\r\ny\r\n"])
    out.append([b"cas {k}c 0 0 1 5 noreply\r\nx\r\n", b"get {k}c\r\n"])
    return out


def _retrieval() -> list[Sequence_]:
    out: list[Sequence_] = []
    setup = [b"set {k}1 1 0 1\r\na\r\n", b"set {k}2 2 0 2\r\nbb\r\n"]
    for cmd in (b"get", b"gets", b"gat 100", b"gats 100", b"gat -1", b"gat abc"):
        for keys in (b"{k}1", b"{k}1 {k}2", b"{k}miss", b"{k}1 {k}miss {k}2 {k}1", b""):
            line = cmd + (b" " + keys if keys else b"") + b"\r\n"
            out.append(setup + [line, b"get {k}1 {k}2\r\n"])
    out.append(setup + [b"get {k}1  {k}2\r\n"])
    out.append(setup + [b"get {k}1 " + b"x" * 251 + b" {k}2\r\n"])
    out.append(setup + [b"get {k}1\n"])
    out.append(setup + [b"get {k}1 \r\n"])
    out.append(setup + [b"gets\r\n", b"gat\r\n", b"gat 10\r\n"])
    return out


def _arith() -> list[Sequence_]:
    out: list[Sequence_] = []
    values = [
        b"0",
        b"10",
        b"99",
        b"18446744073709551615",
        b"abc",
        b"12abc",
        b" 5",
        b"5 ",
        b"007",
        b"",
    ]
    for v, (cmd, delta) in itertools.product(
        values, [(b"incr", b"1"), (b"decr", b"1"), (b"incr", b"100"), (b"decr", b"100")]
    ):
        out.append(
            [
                b"set {k}n 3 0 %d\r\n%s\r\n" % (len(v), v),
                cmd + b" {k}n " + delta + b"\r\n",
                b"get {k}n\r\n",
            ]
        )
    for delta in (b"-1", b"abc", b"18446744073709551616", b"", b"1 noreply", b"1 2"):
        out.append([b"set {k}n 0 0 1\r\n5\r\n", b"incr {k}n " + delta + b"\r\n", b"get {k}n\r\n"])
    out.append([b"incr {k}missing 1\r\n", b"decr {k}missing 1\r\n"])
    out.append([b"set {k}n 0 0 2\r\n99\r\n", b"incr {k}n 1\r\n", b"gets {k}n\r\n"])
    return out


def _delete_touch_misc() -> list[Sequence_]:
    out: list[Sequence_] = []
    for tail in (b"", b" 0", b" 1", b" noreply", b" 0 noreply", b" abc", b" 0 0"):
        out.append([b"set {k}x 0 0 1\r\nx\r\n", b"delete {k}x" + tail + b"\r\n", b"get {k}x\r\n"])
    out.append([b"delete {k}missing\r\n", b"delete\r\n"])
    for tail in (b" 10", b" -1", b" abc", b"", b" 10 noreply"):
        out.append([b"set {k}t 0 0 1\r\nx\r\n", b"touch {k}t" + tail + b"\r\n", b"get {k}t\r\n"])
    out.append([b"touch {k}missing 10\r\n"])
    out.append(
        [b"verbosity\r\n", b"verbosity 1\r\n", b"verbosity 0 noreply\r\n", b"verbosity abc\r\n"]
    )
    out.append([b"version\r\n", b"version extra\r\n"])
    out.append([b"bogus\r\n", b"\r\n", b"\n", b"   \r\n", b"get\r\n"])
    out.append([b"flush_all abc\r\n", b"flush_all -1\r\n"])
    out.append([b"mn\r\n", b"mn extra\r\n"])
    return out


def _meta() -> list[Sequence_]:
    out: list[Sequence_] = []
    setup = [b"ms {k}m 3 T0 F5\r\nbar\r\n"]
    mg_flags = [
        b"v",
        b"f",
        b"s",
        b"t",
        b"k",
        b"O123",
        b"q",
        b"h",
        b"u",
        b"v f s k",
        b"k v O9 f",
        b"c",
        b"v c",
        b"q v",
        b"T30 t v",
        b"N30 v",
        b"R30 v",
        b"!",
        b"v v",
        b"Tabc",
        b"O",
    ]
    for flags in mg_flags:
        out.append(setup + [b"mg {k}m " + flags + b"\r\n", b"mg {k}miss " + flags + b"\r\n"])
    ms_cases = [
        b"2\r\nhi",
        b"2 T10\r\nhi",
        b"2 F7 k\r\nhi",
        b"2 q\r\nhi",
        b"2 O55\r\nhi",
        b"2 ME\r\nhi",
        b"2 MR\r\nhi",
        b"2 MA\r\nhi",
        b"2 MP\r\nhi",
        b"2 MS\r\nhi",
        b"2 MX\r\nhi",
        b"2 C1\r\nhi",
        b"abc\r\nhi",
        b"-1\r\nhi",
        b"2\r\nhiya",
        b"2 I\r\nhi",
        b"2 Fabc\r\nhi",
        b"2 !\r\nhi",
        b"2 k k\r\nhi",
    ]
    for case in ms_cases:
        out.append(setup + [b"ms {k}m " + case + b"\r\n", b"mg {k}m v f t\r\n"])
        out.append([b"ms {k}new " + case + b"\r\n", b"mg {k}new v f t\r\n"])
    for flags in (b"", b"q", b"k", b"O1", b"C1", b"I", b"I T30", b"T30", b"!", b"k k"):
        out.append(setup + [b"md {k}m " + flags + b"\r\n", b"mg {k}m v\r\n", b"mg {k}m v\r\n"])
        out.append([b"md {k}miss " + flags + b"\r\n"])
    for flags in (
        b"",
        b"v",
        b"N0 J5 v",
        b"MD v",
        b"M- D2 v",
        b"MI D10 v t",
        b"D-1",
        b"Jabc N0",
        b"q",
        b"k O3 v",
        b"MX",
        b"C1",
        b"c",
    ):
        out.append([b"ms {k}a 1\r\n9\r\n", b"ma {k}a " + flags + b"\r\n", b"mg {k}a v\r\n"])
        out.append([b"ma {k}amiss " + flags + b"\r\n"])
    key = base64.b64encode(b"{bin}\x01")
    out.append(
        [b"ms " + key + b" 1 b\r\nx\r\n", b"mg " + key + b" b v k\r\n", b"md " + key + b" b\r\n"]
    )
    out.append([b"mg ab%% b v\r\n", b"ms ab%% 1 b\r\nx\r\n"])
    out.append(
        [
            b"ms {k}q 1 q\r\nx\r\n",
            b"mg {k}q v q\r\n",
            b"mg {k}nope v q\r\n",
            b"md {k}nope q\r\n",
            b"mn\r\n",
        ]
    )
    out.append([b"mg " + b"k" * 251 + b" v\r\n", b"ms " + b"k" * 251 + b" 1\r\nx\r\n"])
    # leases: vivify, recache, invalidate
    out.append(
        [b"mg {k}v N30 v t\r\n", b"mg {k}v N30 v t\r\n", b"ms {k}v 1\r\nx\r\n", b"mg {k}v v\r\n"]
    )
    out.append(
        [b"ms {k}r 1 T20\r\nx\r\n", b"mg {k}r v R30\r\n", b"mg {k}r v R30\r\n", b"mg {k}r v\r\n"]
    )
    out.append(
        setup
        + [
            b"md {k}m I T30\r\n",
            b"mg {k}m v\r\n",
            b"mg {k}m v\r\n",
            b"ms {k}m 3\r\nnew\r\n",
            b"mg {k}m v\r\n",
        ]
    )
    out.append(
        setup + [b"md {k}m I\r\n", b"mg {k}m v c\r\n", b"ms {k}m 3 I\r\nnew\r\n", b"mg {k}m v\r\n"]
    )
    return out


def corpus() -> list[Sequence_]:
    return _storage() + _retrieval() + _arith() + _delete_touch_misc() + _meta()
