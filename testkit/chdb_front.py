"""A minimal ClickHouse HTTP interface over chDB, for rankscope's tests only.

In: HTTP requests as the `clickhouse` Rust crate (0.15) and the testkit send them.
Out: answers from chDB (PyPI `chdb`: the ClickHouse engine, 26.x, in-process) in the
formats those clients ask for. Started by `testkit/src/chdb.rs` as
`python chdb_front.py --port P --path DIR`; it serves 127.0.0.1:P until killed.

What it does (everything rankscope uses, nothing more):
- `GET /ping` answers `Ok.`.
- `POST /` (or `GET /?query=`): the SQL is the `query=` parameter, else the body.
  `database=` selects the current database (`USE`), `default_format=` the output
  format (TabSeparated when absent; a `FORMAT` clause in the SQL wins).
- `INSERT INTO t [(cols)] FORMAT F` in `query=` with the rows in the body (Native,
  RowBinary or any input format chDB knows): the body goes to a temp file and runs as
  `INSERT INTO t [(cols)] FROM INFILE '...' FORMAT F` (Native matches columns by name,
  as the server does).
- `decompress=1`: the body is ClickHouse's compressed framing (blocks of a 16-byte
  checksum, method byte, sizes, payload); LZ4 (0x82) and none (0x02) are decoded by a
  pure-Python LZ4 block decoder. The checksum (CityHash128) is NOT verified.
- Other URL parameters are ClickHouse settings, applied with `SET` before the query,
  except HTTP-only ones that change nothing here (`wait_end_of_query`, `query_id`,
  `session_id`, `user`, `password`, `role`, `compress`, `enable_http_compression`).
- Errors: HTTP 500 with chDB's exception text (`Code: N. DB::Exception: ...`) and the
  `X-ClickHouse-Exception-Code` header, as the server answers.

Limits (known, on purpose): one query at a time (a lock; chDB sessions are not
thread-safe); responses are never compressed (the client asks with
`Accept-Encoding`, which a server may ignore); `compress=1` (compressed responses),
sessions, `param_*` server-side parameters, multipart bodies, progress headers,
`X-ClickHouse-Summary`, authentication and TLS are not implemented (a request that
needs one of them gets a 500 naming it); settings set by one request stay set for the
next (the tests use the same few everywhere); data lives in `--path` and dies with it.
"""

import argparse
import http.server
import os
import re
import sys
import tempfile
import threading
import urllib.parse

from chdb import session as chdb_session

IGNORED_PARAMS = {
    "query", "database", "default_format", "decompress", "wait_end_of_query",
    "query_id", "session_id", "user", "password", "role", "enable_http_compression",
}
UNSUPPORTED_PARAMS = {"compress": "compressed responses (compress=1)"}
INSERT_RE = re.compile(
    r"^\s*INSERT\s+INTO\s+(?P<target>.+?)\s+FORMAT\s+(?P<fmt>\w+)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
FORMAT_RE = re.compile(r"\bFORMAT\s+\w+\s*;?\s*$", re.IGNORECASE)
SETTING_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class FrontError(Exception):
    """A request this front cannot serve; answered as HTTP 500 like a server error."""


def lz4_block_decode(src, size):
    """Decodes one LZ4 block (https://github.com/lz4/lz4/blob/dev/doc/lz4_Block_format.md)."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            while True:
                b = src[i]
                i += 1
                lit += b
                if b != 255:
                    break
        out += src[i:i + lit]
        i += lit
        if i >= n:
            break
        offset = src[i] | (src[i + 1] << 8)
        i += 2
        if offset == 0 or offset > len(out):
            raise FrontError(f"corrupt LZ4 block: match offset {offset}")
        length = token & 15
        if length == 15:
            while True:
                b = src[i]
                i += 1
                length += b
                if b != 255:
                    break
        length += 4
        start = len(out) - offset
        if length <= offset:
            out += out[start:start + length]
        else:
            for k in range(length):
                out.append(out[start + k])
    if len(out) != size:
        raise FrontError(f"LZ4 block decoded to {len(out)} bytes, header says {size}")
    return bytes(out)


def decompress_body(body):
    """ClickHouse's compressed framing: per block 16-byte checksum, method, sizes, data."""
    out, i = bytearray(), 0
    while i < len(body):
        if len(body) - i < 25:
            raise FrontError("truncated compressed block header")
        method = body[i + 16]
        compressed = int.from_bytes(body[i + 17:i + 21], "little")
        raw = int.from_bytes(body[i + 21:i + 25], "little")
        payload = body[i + 25:i + 16 + compressed]
        if method == 0x82:
            out += lz4_block_decode(payload, raw)
        elif method == 0x02:
            out += payload
        else:
            raise FrontError(f"compression method 0x{method:02x} is not supported by the front")
        i += 16 + compressed
    return bytes(out)


class Engine:
    """One chDB session, used by one request at a time."""

    def __init__(self, path):
        self.session = chdb_session.Session(path)
        self.lock = threading.Lock()
        self.tmp = tempfile.mkdtemp(prefix="rows-", dir=path)

    def run(self, params, body):
        for name in params:
            if name in UNSUPPORTED_PARAMS:
                raise FrontError(f"the chdb front does not implement {UNSUPPORTED_PARAMS[name]}")
            if name.startswith("param_"):
                raise FrontError("the chdb front does not implement server-side parameters")
        if params.get("decompress") == "1":
            body = decompress_body(body)
        query = params.get("query")
        data = None
        if query is None:
            sql = body.decode("utf-8")
        else:
            m = INSERT_RE.match(query)
            if m and body:
                sql, data = None, (m.group("target"), m.group("fmt"), body)
            else:
                sql = query + ("\n" + body.decode("utf-8") if body else "")
        with self.lock:
            self.session.query(f"USE `{params.get('database') or 'default'}`")
            for name, value in params.items():
                if name in IGNORED_PARAMS:
                    continue
                if not SETTING_RE.match(name):
                    raise FrontError(f"bad setting name {name!r}")
                quoted = value.replace("\\", "\\\\").replace("'", "\\'")
                self.session.query(f"SET {name} = '{quoted}'")
            if data is not None:
                return self.insert(*data)
            fmt = params.get("default_format") or "TabSeparated"
            if FORMAT_RE.search(sql):
                return self.session.query(sql).bytes()
            return self.session.query(sql, fmt).bytes()

    def insert(self, target, fmt, rows):
        fd, path = tempfile.mkstemp(dir=self.tmp)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(rows)
            self.session.query(f"INSERT INTO {target} FROM INFILE '{path}' FORMAT {fmt}")
        finally:
            os.unlink(path)
        return b""


def read_body(handler):
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            line = handler.rfile.readline()
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine = None

    def log_message(self, *args):
        pass

    def answer(self, status, body, headers=()):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        body = read_body(self)
        if url.path == "/ping":
            return self.answer(200, b"Ok.\n")
        if url.path not in ("/", ""):
            return self.answer(404, f"the chdb front serves / and /ping, not {url.path}\n".encode())
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        try:
            out = self.engine.run(params, body)
        except FrontError as e:
            return self.answer(500, f"Code: 48. DB::Exception: {e}. (NOT_IMPLEMENTED)\n".encode(),
                               [("X-ClickHouse-Exception-Code", "48")])
        except Exception as e:  # chDB's errors carry ClickHouse's exception text
            text = str(e)
            m = re.match(r"Code: (\d+)\.", text)
            code = m.group(1) if m else "1001"
            return self.answer(500, (text + "\n").encode(), [("X-ClickHouse-Exception-Code", code)])
        self.answer(200, out)

    do_GET = handle_any
    do_POST = handle_any


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True, help="chDB data directory")
    args = parser.parse_args()
    Handler.engine = Engine(args.path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"chdb front on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
