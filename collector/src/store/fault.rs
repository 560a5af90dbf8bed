//! Classifies ClickHouse client errors as transient (retry later) or permanent (the data
//! or statement itself is bad).
//!
//! In: a `clickhouse::error::Error`. Out: [`Fault`].
//!
//! How the server's verdict reaches us: `clickhouse` 0.15 turns every non-200 answer into
//! `Error::BadResponse(body)`, dropping the HTTP status unless the body is empty (then
//! the text is `"<status> <reason>"` or `"Code: N"` from the `X-ClickHouse-Exception-Code`
//! header). ClickHouse 18.16 does not send that header and answers many data errors with
//! HTTP 500, so the status is no guide anyway. The body starts with the server error code
//! on every version (`Code: 27, e.displayText() = ...` on 18.16, `Code: 27. DB::Exception:`
//! today); we parse it and treat the codes below as permanent.
//!
//! Policy: permanent means "retrying the same rows can never succeed" (parse and type
//! errors, malformed RowBinary, client-side serialisation failures). Everything else,
//! including unknown codes, missing tables (a migration will recreate them), auth errors
//! (an operator fixes them) and resource limits, is transient: the agent keeps the batch
//! and retries, so nothing acknowledged is lost.

use clickhouse::error::Error;

/// What a failed ClickHouse call means for the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// ClickHouse is down, slow or temporarily refusing: retry later.
    Transient,
    /// The rows or the statement are malformed: retrying cannot help.
    Permanent,
}

/// Server error codes that reject the data itself (names as in ClickHouse's ErrorCodes).
const PERMANENT_CODES: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    16,  // NO_SUCH_COLUMN_IN_TABLE
    20,  // NUMBER_OF_COLUMNS_DOESNT_MATCH
    25,  // CANNOT_PARSE_ESCAPE_SEQUENCE
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,  // ATTEMPT_TO_READ_AFTER_EOF
    33,  // CANNOT_READ_ALL_DATA
    36,  // BAD_ARGUMENTS (e.g. unknown Enum value on current servers)
    38,  // CANNOT_PARSE_DATE
    41,  // CANNOT_PARSE_DATETIME
    43,  // ILLEGAL_TYPE_OF_ARGUMENT
    44,  // ILLEGAL_COLUMN
    47,  // UNKNOWN_IDENTIFIER
    50,  // UNKNOWN_TYPE
    53,  // TYPE_MISMATCH
    62,  // SYNTAX_ERROR
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER
    73,  // UNKNOWN_FORMAT
    117, // INCORRECT_DATA
    130, // CANNOT_READ_ARRAY_FROM_TEXT
    131, // TOO_LARGE_STRING_SIZE
    190, // SIZES_OF_ARRAYS_DOESNT_MATCH
    691, // UNKNOWN_ELEMENT_OF_ENUM
];

/// Classifies a client error (see the module docs for the policy).
pub(crate) fn classify(error: &Error) -> Fault {
    match error {
        Error::BadResponse(body) => match server_code(body) {
            Some(code) if PERMANENT_CODES.contains(&code) => Fault::Permanent,
            Some(_) => Fault::Transient,
            // No body: only the HTTP status survived. 4xx other than auth/limits = bad request.
            None => match body
                .split_whitespace()
                .next()
                .and_then(|s| s.parse::<u16>().ok())
            {
                Some(400 | 404 | 411 | 413 | 414) => Fault::Permanent,
                _ => Fault::Transient,
            },
        },
        // The rows could not even be serialised: the same rows will fail again.
        Error::InvalidParams(_)
        | Error::SequenceMustHaveLength
        | Error::Custom(_)
        | Error::InvalidUtf8Encoding(_)
        | Error::InvalidTagEncoding(_)
        | Error::VariantDiscriminatorIsOutOfBound(_)
        | Error::SchemaMismatch(_)
        | Error::Unsupported(_) => Fault::Permanent,
        // Network, timeouts, (de)compression of a cut-off stream, anything new.
        _ => Fault::Transient,
    }
}

/// The `N` of a leading `Code: N` in a ClickHouse error body.
fn server_code(body: &str) -> Option<u32> {
    let rest = body.trim_start().strip_prefix("Code:")?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(body: &str) -> Error {
        Error::BadResponse(body.to_string())
    }

    #[test]
    fn parses_codes_of_old_and_new_servers() {
        assert_eq!(
            server_code("Code: 33, e.displayText() = DB::Exception: Cannot read all data"),
            Some(33)
        );
        assert_eq!(
            server_code("Code: 27. DB::Exception: Cannot parse input"),
            Some(27)
        );
        assert_eq!(server_code("Code: 241"), Some(241));
        assert_eq!(server_code("500 Internal Server Error"), None);
        assert_eq!(server_code("Code: x"), None);
    }

    #[test]
    fn data_errors_are_permanent() {
        let cases = [
            "Code: 33, e.displayText() = DB::Exception: Cannot read all data. Bytes read: 2.",
            "Code: 53. DB::Exception: Type mismatch",
            "Code: 62, e.displayText() = DB::Exception: Syntax error",
            "400 Bad Request",
        ];
        for body in cases {
            assert_eq!(classify(&bad(body)), Fault::Permanent, "{body}");
        }
        assert_eq!(classify(&Error::Custom("bad row".into())), Fault::Permanent);
    }

    #[test]
    fn outages_and_limits_are_transient() {
        let cases = [
            "Code: 241, e.displayText() = DB::Exception: Memory limit exceeded",
            "Code: 252. DB::Exception: Too many parts",
            "Code: 60. DB::Exception: Table rankscope.steps doesn't exist",
            "Code: 516. DB::Exception: default: Authentication failed",
            "Code: 9999. DB::Exception: something new",
            "503 Service Unavailable",
            "500 Internal Server Error",
            "",
        ];
        for body in cases {
            assert_eq!(classify(&bad(body)), Fault::Transient, "{body}");
        }
        assert_eq!(classify(&Error::TimedOut), Fault::Transient);
        assert_eq!(
            classify(&Error::Network("connection refused".into())),
            Fault::Transient
        );
    }
}
