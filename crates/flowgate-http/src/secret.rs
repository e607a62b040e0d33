//! Tokens that never print.

/// A credential (an API token, a private key). `Debug` and `Display` print `***`, so a
/// configuration struct that holds one can derive `Debug` and be logged without leaking it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The credential itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty (an unset token).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn never_prints_its_value() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Config {
            token: Secret,
        }
        let c = Config {
            token: Secret::new("ghp_abc123"),
        };
        let shown = format!("{c:?} {}", c.token);
        assert!(!shown.contains("ghp_abc123"), "{shown}");
        assert_eq!(c.token.expose(), "ghp_abc123");
    }
}
