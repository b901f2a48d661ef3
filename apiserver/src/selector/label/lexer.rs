//! The label selector lexer (apimachinery pkg/labels/selector.go `Lexer`): operators are
//! the longest run of special symbols that names one, `in`/`notin` are keywords.

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Token {
    End,
    ClosedPar,
    Comma,
    Not,
    DoubleEquals,
    Equals,
    Greater,
    Identifier(String),
    In,
    Less,
    NotEquals,
    NotIn,
    OpenPar,
    Error(String),
}

impl Token {
    pub(super) fn literal(&self) -> String {
        match self {
            Token::End => String::new(),
            Token::ClosedPar => ")".into(),
            Token::Comma => ",".into(),
            Token::Not => "!".into(),
            Token::DoubleEquals => "==".into(),
            Token::Equals => "=".into(),
            Token::Greater => ">".into(),
            Token::Identifier(s) | Token::Error(s) => s.clone(),
            Token::In => "in".into(),
            Token::Less => "<".into(),
            Token::NotEquals => "!=".into(),
            Token::NotIn => "notin".into(),
            Token::OpenPar => "(".into(),
        }
    }

    /// In value context `in` and `notin` are plain identifiers (`x in (in)`).
    pub(super) fn into_value(self) -> Token {
        match self {
            Token::In | Token::NotIn => Token::Identifier(self.literal()),
            t => t,
        }
    }
}

fn special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn symbol(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::Not,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::Greater,
        "<" => Token::Less,
        "!=" => Token::NotEquals,
        "(" => Token::OpenPar,
        "in" => Token::In,
        "notin" => Token::NotIn,
        _ => return None,
    })
}

pub(super) fn lex(s: &str) -> Vec<Token> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && matches!(b[pos], b' ' | b'\t' | b'\r' | b'\n') {
            pos += 1;
        }
        if pos >= b.len() {
            out.push(Token::End);
            return out;
        }
        let start = pos;
        if special(b[pos]) {
            // Longest operator made of special symbols (the lexer's scanSpecialSymbol).
            let mut last: Option<(Token, usize)> = None;
            while pos < b.len() && special(b[pos]) {
                pos += 1;
                match symbol(&s[start..pos]) {
                    Some(t) => last = Some((t, pos)),
                    None if last.is_some() => break,
                    None => {}
                }
            }
            match last {
                Some((t, end)) => {
                    pos = end;
                    out.push(t);
                }
                None => {
                    out.push(Token::Error(format!(
                        "error expected: keyword found '{}'",
                        &s[start..pos]
                    )));
                }
            }
        } else {
            while pos < b.len()
                && !special(b[pos])
                && !matches!(b[pos], b' ' | b'\t' | b'\r' | b'\n')
            {
                pos += 1;
            }
            let word = &s[start..pos];
            out.push(match word {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier(word.to_string()),
            });
        }
    }
}
