//! Splitting one CSV line into fields; enough for the trace files (RFC 4180 quoting,
//! no fields spanning lines).

/// The fields of `line`; double-quoted fields may hold commas and `""` escapes.
pub(crate) fn split_line(line: &str) -> Vec<String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut in_quotes = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, in_quotes) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => in_quotes = false,
            ('"', false) if field.is_empty() => in_quotes = true,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod tests {
    use super::split_line;

    #[test]
    fn splits_plain_and_quoted_fields() {
        assert_eq!(split_line("a,b,,c"), ["a", "b", "", "c"]);
        assert_eq!(
            split_line("\"x, y\",\"say \"\"hi\"\"\",z\r"),
            ["x, y", "say \"hi\"", "z"]
        );
    }
}
