//! `labelSelector`: parsed and matched as apimachinery's `labels.Parse`
//! and `Requirement.Matches` do (staging/src/k8s.io/apimachinery/pkg/labels/
//! selector.go): `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
//! `k notin (a)`, `k>1`, `k<1`, requirements joined by commas (AND).

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Clone, Debug)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A label selector: every requirement must hold (none: everything).
#[derive(Clone, Debug, Default)]
pub(crate) struct Selector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
    End,
}

fn special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

/// The tokens of `text` with their literals, as selector.go's `Lexer`
/// scans them (`in` and `notin` are identifiers here; only the operator
/// position reads them as keywords, as the parser's contexts do).
fn lex(text: &str) -> Vec<(Token, String)> {
    let mut tokens = Vec::new();
    let mut rest = text.trim_start_matches([' ', '\t', '\r', '\n']);
    while let Some(c) = rest.chars().next() {
        let (token, len) = if special(c) {
            match (c, rest[1..].chars().next()) {
                ('=', Some('=')) => (Token::DoubleEquals, 2),
                ('!', Some('=')) => (Token::NotEquals, 2),
                ('=', _) => (Token::Equals, 1),
                ('!', _) => (Token::Not, 1),
                ('(', _) => (Token::Open, 1),
                (')', _) => (Token::Close, 1),
                (',', _) => (Token::Comma, 1),
                ('>', _) => (Token::GreaterThan, 1),
                _ => (Token::LessThan, 1),
            }
        } else {
            let len = rest
                .find(|c: char| special(c) || matches!(c, ' ' | '\t' | '\r' | '\n'))
                .unwrap_or(rest.len());
            (Token::Ident, len)
        };
        tokens.push((token, rest[..len].to_owned()));
        rest = rest[len..].trim_start_matches([' ', '\t', '\r', '\n']);
    }
    tokens.push((Token::End, String::new()));
    tokens
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters: a
/// label value (when not empty) and the name part of a label key.
fn is_label_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// apimachinery's `IsQualifiedName` (what `IsLabelKey` checks).
fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => super::api::is_dns1123_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    }
}

struct Parser {
    tokens: Vec<(Token, String)>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> &(Token, String) {
        &self.tokens[self.at]
    }

    fn next(&mut self) -> (Token, String) {
        let token = self.tokens[self.at].clone();
        if token.0 != Token::End {
            self.at += 1;
        }
        token
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            match self.peek().clone() {
                (Token::Ident | Token::Not, _) => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    match self.next() {
                        (Token::End, _) => return Ok(requirements),
                        (Token::Comma, _) => {
                            let (t, l) = self.peek();
                            if !matches!(t, Token::Ident | Token::Not) {
                                return Err(format!("found '{l}', expected: identifier after ','"));
                            }
                        }
                        (_, l) => {
                            return Err(format!("found '{l}', expected: ',' or 'end of string'"))
                        }
                    }
                }
                (Token::End, _) => return Ok(requirements),
                (_, l) => {
                    return Err(format!(
                        "found '{l}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut token = self.next();
        let not = token.0 == Token::Not;
        if not {
            token = self.next();
        }
        let (Token::Ident, key) = token else {
            return Err(format!("found '{}', expected: identifier", token.1));
        };
        if !is_label_key(&key) {
            return Err(format!("{key:?}: not a valid label key"));
        }
        if not || matches!(self.peek().0, Token::End | Token::Comma) {
            let op = if not { Op::DoesNotExist } else { Op::Exists };
            return Ok(Requirement {
                key,
                op,
                values: Vec::new(),
            });
        }
        let (op, set) = match self.next() {
            (Token::Ident, word) if word == "in" => (Op::In, true),
            (Token::Ident, word) if word == "notin" => (Op::NotIn, true),
            (Token::Equals | Token::DoubleEquals, _) => (Op::In, false),
            (Token::NotEquals, _) => (Op::NotIn, false),
            (Token::GreaterThan, _) => (Op::GreaterThan, false),
            (Token::LessThan, _) => (Op::LessThan, false),
            (_, l) => {
                return Err(format!(
                    "found '{l}', expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        };
        let values = if set {
            self.values()?
        } else {
            self.exact_value()?
        };
        if let Some(bad) = values.iter().find(|v| !v.is_empty() && !is_label_name(v)) {
            return Err(format!(
                "{key}: Invalid value: {bad:?}: not a valid label value"
            ));
        }
        if matches!(op, Op::GreaterThan | Op::LessThan) && values[0].parse::<i64>().is_err() {
            return Err(format!(
                "{key}: Invalid value: {:?}: for 'Gt', 'Lt' operators, the value must be an integer",
                values[0]
            ));
        }
        Ok(Requirement { key, op, values })
    }

    /// `(a,b)`: selector.go's `parseValues` and `parseIdentifiersList`
    /// (empty values allowed: `()`, `(a,)`).
    fn values(&mut self) -> Result<Vec<String>, String> {
        let (t, l) = self.next();
        if t != Token::Open {
            return Err(format!("found '{l}' expected: '('"));
        }
        if self.peek().0 == Token::Close {
            self.next();
            return Ok(vec![String::new()]);
        }
        let mut values = Vec::new();
        loop {
            match self.next() {
                (Token::Ident, value) => {
                    values.push(value);
                    match self.peek() {
                        (Token::Comma, _) => {}
                        (Token::Close, _) => {
                            self.next();
                            return Ok(values);
                        }
                        (_, l) => return Err(format!("found '{l}', expected: ',' or ')'")),
                    }
                }
                (Token::Comma, _) => {
                    if values.is_empty() || matches!(self.peek().0, Token::Close | Token::Comma) {
                        values.push(String::new());
                    }
                    if self.peek().0 == Token::Close {
                        self.next();
                        return Ok(values);
                    }
                }
                (_, l) => return Err(format!("found '{l}', expected: ',', or identifier")),
            }
        }
    }

    /// The one value of `=`, `==`, `!=`, `>`, `<` (empty if none follows).
    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        if matches!(self.peek().0, Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        match self.next() {
            (Token::Ident, value) => Ok(vec![value]),
            (_, l) => Err(format!("found '{l}', expected: identifier")),
        }
    }
}

impl Selector {
    /// `text` parsed, or why not (kube-apiserver answers 400 BadRequest).
    pub(crate) fn parse(text: &str) -> Result<Selector, String> {
        let mut parser = Parser {
            tokens: lex(text),
            at: 0,
        };
        parser.selector().map(Selector)
    }

    /// Whether it selects every object (no requirement).
    pub(crate) fn is_everything(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `object`'s `metadata.labels` meet every requirement.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|r| {
            let label = labels.get(&r.key).and_then(Value::as_str);
            let number = |v: &str| v.parse::<i64>().ok();
            match (r.op, label) {
                (Op::Exists, l) => l.is_some(),
                (Op::DoesNotExist, l) => l.is_none(),
                (Op::In, Some(l)) => r.values.iter().any(|v| v == l),
                (Op::NotIn, Some(l)) => !r.values.iter().any(|v| v == l),
                (Op::NotIn, None) => true,
                (Op::GreaterThan, Some(l)) => {
                    matches!((number(l), number(&r.values[0])), (Some(l), Some(v)) if l > v)
                }
                (Op::LessThan, Some(l)) => {
                    matches!((number(l), number(&r.values[0])), (Some(l), Some(v)) if l < v)
                }
                (Op::In | Op::GreaterThan | Op::LessThan, None) => false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Selector;
    use serde_json::json;

    fn with(labels: serde_json::Value) -> serde_json::Value {
        json!({ "metadata": { "labels": labels } })
    }

    #[test]
    fn parses_and_matches_as_apimachinery() {
        let object = with(json!({ "app": "web", "tier": "front", "n": "5" }));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app = web , tier", true),
            ("app!=web", false),
            ("other!=x", true),
            ("app", true),
            ("!app", false),
            ("!other", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("other notin (db)", true),
            ("other in (db)", false),
            ("n>4,n<6", true),
            ("n>5", false),
            ("app=web,tier=back", false),
            ("in in (in)", false),
            ("other=", false),
            ("other notin (,a)", true),
        ];
        for (text, expected) in cases {
            let selector = Selector::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(selector.matches(&object), expected, "{text}");
        }
        for bad in [
            "=web",
            "app in web",
            "app in (a",
            "app==(a)",
            "!",
            "a,",
            "a b",
            "n>x",
            "a/b/c",
            "app=a b",
            "-app",
        ] {
            assert!(Selector::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
