//! The small SQL reader of the cluster rewriter: tokens of one statement (comments and
//! whitespace dropped, quotes kept whole), a cursor over them, and column-list helpers.
//!
//! In: one statement of a schema file. Out: tokens with byte spans into it, so the
//! rewriter copies untouched text (types, expressions, comments) verbatim.
//! Invariants: never panics on any input; an unterminated quote or comment is an error.

use super::{reject, RewriteError};

/// Names of the columns of a column list (the tokens between its parentheses).
pub(super) fn column_names(sql: &str, tokens: &[Token]) -> Vec<String> {
    let mut names = Vec::new();
    let mut expect_name = true;
    let mut depth = 0usize;
    for t in tokens {
        if t.is_punct(sql, '(') {
            depth += 1;
        } else if t.is_punct(sql, ')') {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_punct(sql, ',') {
            expect_name = true;
            continue;
        }
        if expect_name && depth == 0 {
            if let Some(name) = t.ident(sql) {
                names.push(name);
            }
        }
        expect_name = false;
    }
    names
}

/// The tokens outside any parentheses.
pub(super) fn depth_zero<'a>(
    sql: &'a str,
    tokens: &'a [Token],
) -> impl Iterator<Item = &'a Token> + 'a {
    let mut depth = 0usize;
    tokens.iter().filter(move |t| {
        if t.is_punct(sql, '(') {
            depth += 1;
            false
        } else if t.is_punct(sql, ')') {
            depth = depth.saturating_sub(1);
            false
        } else {
            depth == 0
        }
    })
}

/// A cursor over the tokens of one statement.
pub(super) struct Parser<'a> {
    pub sql: &'a str,
    pub tokens: &'a [Token],
    pub pos: usize,
}

impl Parser<'_> {
    /// Consumes `words` (case-insensitive) if they come next, all of them.
    pub(super) fn eat_words(&mut self, words: &[&str]) -> bool {
        let all = words.iter().enumerate().all(|(k, w)| {
            self.tokens
                .get(self.pos + k)
                .is_some_and(|t| t.is_word(self.sql, w))
        });
        if all {
            self.pos += words.len();
        }
        all
    }

    pub(super) fn eat_punct(&mut self, c: char) -> bool {
        let hit = self
            .tokens
            .get(self.pos)
            .is_some_and(|t| t.is_punct(self.sql, c));
        if hit {
            self.pos += 1;
        }
        hit
    }

    pub(super) fn word(&mut self) -> Option<String> {
        let t = self.tokens.get(self.pos)?;
        if t.kind != Kind::Word {
            return None;
        }
        self.pos += 1;
        Some(t.text(self.sql).to_string())
    }

    /// An unqualified table name.
    pub(super) fn table_name(&mut self) -> Result<String, RewriteError> {
        let Some(name) = self.tokens.get(self.pos).and_then(|t| t.ident(self.sql)) else {
            return reject("expected a table name");
        };
        self.pos += 1;
        if self
            .tokens
            .get(self.pos)
            .is_some_and(|t| t.is_punct(self.sql, '.'))
        {
            return reject(format!(
                "{name}.{}: schema statements name tables without a database",
                self.tokens
                    .get(self.pos + 1)
                    .map_or("", |t| t.text(self.sql))
            ));
        }
        Ok(name)
    }

    /// If `(` comes next: the token indexes of it and its matching `)`, consumed.
    pub(super) fn parens(&mut self) -> Option<(usize, usize)> {
        let open = self.pos;
        if !self.tokens.get(open)?.is_punct(self.sql, '(') {
            return None;
        }
        let mut depth = 0usize;
        for (i, t) in self.tokens.iter().enumerate().skip(open) {
            if t.is_punct(self.sql, '(') {
                depth += 1;
            } else if t.is_punct(self.sql, ')') {
                depth -= 1;
                if depth == 0 {
                    self.pos = i + 1;
                    return Some((open, i));
                }
            }
        }
        None
    }

    /// The source text of tokens `first..=last` (empty when `first > last`).
    pub(super) fn span(&self, first: usize, last: usize) -> &str {
        if first > last || last >= self.tokens.len() {
            return "";
        }
        &self.sql[self.tokens[first].start..self.tokens[last].end]
    }

    /// The source text after the cursor.
    pub(super) fn rest(&self) -> &str {
        self.tokens
            .get(self.pos)
            .map_or("", |t| &self.sql[t.start..])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Keyword, bare identifier or number.
    Word,
    /// `'...'`.
    Str,
    /// `` `...` `` or `"..."`.
    QuotedIdent,
    Punct,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

impl Token {
    pub(super) fn text<'a>(&self, sql: &'a str) -> &'a str {
        &sql[self.start..self.end]
    }

    pub(super) fn is_word(&self, sql: &str, word: &str) -> bool {
        self.kind == Kind::Word && self.text(sql).eq_ignore_ascii_case(word)
    }

    pub(super) fn is_punct(&self, sql: &str, c: char) -> bool {
        self.kind == Kind::Punct && self.text(sql).starts_with(c)
    }

    /// The identifier this token names, quotes removed.
    pub(super) fn ident(&self, sql: &str) -> Option<String> {
        let text = self.text(sql);
        match self.kind {
            Kind::Word => Some(text.to_string()),
            Kind::QuotedIdent => Some(text[1..text.len() - 1].to_string()),
            _ => None,
        }
    }
}

/// Splits a statement into tokens; comments and whitespace are dropped.
pub(super) fn lex(sql: &str) -> Result<Vec<Token>, RewriteError> {
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        if b.is_ascii_whitespace() {
            i += 1;
        } else if bytes[i..].starts_with(b"--") {
            i = sql[i..].find('\n').map_or(bytes.len(), |n| i + n);
        } else if bytes[i..].starts_with(b"/*") {
            i = sql[i + 2..]
                .find("*/")
                .map(|n| i + 2 + n + 2)
                .ok_or_else(|| RewriteError("unterminated /* comment".into()))?;
        } else if b.is_ascii_alphanumeric() || b == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            tokens.push(Token {
                kind: Kind::Word,
                start,
                end: i,
            });
        } else if matches!(b, b'\'' | b'`' | b'"') {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return reject(format!("unterminated {} quote", b as char)),
                    Some(b'\\') => i += 2,
                    Some(&c) if c == b => {
                        i += 1;
                        // A doubled quote is an escaped quote.
                        if bytes.get(i) == Some(&b) {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    Some(_) => i += 1,
                }
            }
            let kind = if b == b'\'' {
                Kind::Str
            } else {
                Kind::QuotedIdent
            };
            tokens.push(Token {
                kind,
                start,
                end: i,
            });
        } else {
            // One punctuation character (multi-byte characters stay whole).
            i += sql[i..].chars().next().map_or(1, char::len_utf8);
            tokens.push(Token {
                kind: Kind::Punct,
                start,
                end: i,
            });
        }
    }
    Ok(tokens)
}
