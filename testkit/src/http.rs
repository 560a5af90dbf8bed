//! A tiny blocking HTTP/1.1 client over `std::net::TcpStream`, enough to talk to
//! ClickHouse's HTTP interface from test support code without extra dependencies.
//!
//! In: an `http://host:port[/path]` base URL, a method, a path with query string and a
//! body. Out: the status code and the (de-chunked) body as a `String`.
//! Invariants: one request per connection (`Connection: close`), every socket operation
//! has a timeout, only plain `http://` is supported.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::TestkitError;

/// A parsed `http://host:port` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// `host:port`, as used for the socket and the `Host` header.
    pub authority: String,
}

impl Endpoint {
    /// Parses `http://host[:port][/...]`; the path part is ignored.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, TestkitError> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            TestkitError::Http(format!(
                "unsupported URL {url:?}: only http:// is supported"
            ))
        })?;
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        if authority.is_empty() {
            return Err(TestkitError::Http(format!("URL {url:?} has no host")));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.contains(']'))
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint { authority })
    }
}

/// Sends one request and returns `(status, body)`.
pub(crate) fn request(
    endpoint: &Endpoint,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, String), TestkitError> {
    let io = |e: std::io::Error| {
        // A socket timeout reads as EAGAIN ("Resource temporarily
        // unavailable"): say what it means.
        let e = match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("no answer within {timeout:?} ({e})")
            }
            _ => e.to_string(),
        };
        TestkitError::Http(format!(
            "{method} http://{}{path_and_query}: {e}",
            endpoint.authority
        ))
    };
    let addr = endpoint
        .authority
        .to_socket_addrs()
        .map_err(io)?
        .next()
        .ok_or_else(|| TestkitError::Http(format!("{} resolves to nothing", endpoint.authority)))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    let head = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n",
        endpoint.authority,
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    parse_response(&raw)
}

/// Splits a raw HTTP/1.1 response into status and body, undoing chunked encoding.
fn parse_response(raw: &[u8]) -> Result<(u16, String), TestkitError> {
    let bad = |what: &str| TestkitError::Http(format!("malformed HTTP response: {what}"));
    let split = find(raw, b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let payload = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("no status code"))?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(payload).ok_or_else(|| bad("bad chunk"))?
    } else {
        payload.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = find(data, b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Percent-encodes a query-string value.
pub(crate) fn encode_query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:8123/").unwrap();
        assert_eq!(e.authority, "127.0.0.1:8123");
        assert_eq!(Endpoint::parse("http://ch?x=1").unwrap().authority, "ch:80");
        assert!(Endpoint::parse("https://ch:8443").is_err());
        assert!(Endpoint::parse("http://").is_err());
    }

    #[test]
    fn parses_plain_and_chunked_responses() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nOk.\n";
        assert_eq!(parse_response(plain).unwrap(), (200, "Ok.\n".to_string()));
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap(), (404, "abcde".to_string()));
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err()
        );
    }

    #[test]
    fn encodes_query_values() {
        assert_eq!(encode_query_value("SELECT 1+1"), "SELECT%201%2B1");
        assert_eq!(encode_query_value("a_b-c.d~"), "a_b-c.d~");
    }
}
