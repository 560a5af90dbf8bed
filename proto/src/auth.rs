//! Bearer-token authentication shared by the collector (checking) and its
//! clients (agent, CLI): `authorization: Bearer <token>` on every gRPC call
//! and HTTP request. An empty configured token disables the check.

/// The header value for `token`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Whether the `authorization` header value carries `expected` (compared in
/// constant time for equal lengths). An empty `expected` accepts anything.
pub fn authorized(header: Option<&str>, expected: &str) -> bool {
    if expected.is_empty() {
        return true;
    }
    let Some(got) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (got.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_the_bearer_token() {
        assert!(authorized(None, ""));
        assert!(authorized(Some("Bearer s3cret"), "s3cret"));
        assert!(!authorized(Some("Bearer s3cret"), "s3cres"));
        assert!(!authorized(Some("Bearer s3cre"), "s3cret"));
        assert!(!authorized(Some("s3cret"), "s3cret"));
        assert!(!authorized(None, "s3cret"));
        assert_eq!(bearer("t"), "Bearer t");
    }
}
