//! The handle opener (`Keyring::open`, `open_bytes`) and the key parser (`Keyring::parse`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use flowgate_core::handle::{
    HandleKey, ID_MAX, Keyring, LOCATOR_MAX, OpenError, OpenedTask, ToolTag, packed_len,
};
use proptest::prelude::*;

use crate::cases;

fn ring() -> Keyring {
    Keyring::new(
        HandleKey::new("k2", &[2; 32]).expect("key"),
        vec![HandleKey::new("k1", &[1; 32]).expect("key")],
    )
}

/// A task as a task id holds it: a tool's tag, a creation time within the id's 48 bits of
/// milliseconds, and a locator of every shape engines make (and raw text short enough to fit).
#[derive(Debug, Clone, PartialEq)]
struct Task {
    tool: ToolTag,
    created_at: DateTime<Utc>,
    locator: String,
}

impl Task {
    fn opened(&self) -> OpenedTask {
        OpenedTask::Compact {
            tool: self.tool,
            created_at: self.created_at,
            locator: self.locator.clone(),
        }
    }

    fn seal(&self, ring: &Keyring, principal: &str) -> String {
        ring.seal(self.tool, self.created_at, &self.locator, principal)
            .expect("fits")
    }
}

fn locator() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        "[0-9a-f]{2,60}",
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[A-Za-z0-9_-]{1,80}",
        ".{0,15}",
    ]
}

fn task() -> impl Strategy<Value = Task> {
    (".{0,40}", ".{0,40}", 0i64..(1 << 48), locator()).prop_map(|(name, scope, millis, locator)| {
        Task {
            tool: ToolTag::of("engine", &name, &scope),
            created_at: DateTime::from_timestamp_millis(millis).expect("in range"),
            locator,
        }
    })
}

/// One edit of a valid handle: what a client that mangles, truncates or forges ids sends.
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, char),
    Delete(usize, usize),
    Insert(usize, String),
    Truncate(usize),
    SwapCase(usize),
    ReKey(String),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (
            any::<usize>(),
            prop_oneof![
                proptest::char::ranges(vec!['A'..='Z', 'a'..='z', '0'..='9'].into()),
                Just('-'),
                Just('_'),
                Just('.'),
                Just('='),
                any::<char>(),
            ]
        )
            .prop_map(|(at, c)| Edit::Replace(at, c)),
        (any::<usize>(), 1usize..8).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), "[A-Za-z0-9._=-]{1,6}").prop_map(|(at, s)| Edit::Insert(at, s)),
        any::<usize>().prop_map(Edit::Truncate),
        any::<usize>().prop_map(Edit::SwapCase),
        "[a-z0-9]{0,17}".prop_map(Edit::ReKey),
    ]
}

fn apply(token: &str, edit: &Edit) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match edit {
        Edit::Replace(i, c) if !chars.is_empty() => {
            let i = at(*i, chars.len());
            chars[i] = *c;
        }
        Edit::Delete(i, n) => {
            let i = at(*i, chars.len());
            let end = (i + n).min(chars.len());
            chars.drain(i..end);
        }
        Edit::Insert(i, s) => {
            let i = at(*i, chars.len() + 1);
            chars.splice(i..i, s.chars());
        }
        Edit::Truncate(i) => chars.truncate(at(*i, chars.len())),
        Edit::SwapCase(i) if !chars.is_empty() => {
            let i = at(*i, chars.len());
            let c = chars[i];
            chars[i] = if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
        }
        Edit::ReKey(kid) => {
            let mut parts = token.splitn(3, '.');
            let (p, _, data) = (parts.next(), parts.next(), parts.next());
            return format!("{}.{kid}.{}", p.unwrap_or(""), data.unwrap_or(""));
        }
        Edit::Replace(..) | Edit::SwapCase(_) => {}
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(cases(500))]

    /// Any text at all: refused, as "not found" (one of the three uninformative variants).
    #[test]
    fn arbitrary_text_never_opens(token in ".{0,300}", principal in ".{0,40}") {
        let opened = ring().open(&token, &principal);
        prop_assert!(opened.is_err());
    }

    /// Text in a handle's own shape (`fg2.<base64url of any bytes>`, whose first byte may name
    /// a key this ring holds, and `fg1.<kid>.<base64url>`): the seal refuses it.
    #[test]
    fn forged_handles_in_the_right_shape_never_open(
        kid in prop_oneof![Just("k1".to_owned()), Just("k2".to_owned()), "[a-z0-9]{1,16}"],
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let token = format!("fg1.{kid}.{}", URL_SAFE_NO_PAD.encode(&data));
        prop_assert!(ring().open(&token, "p").is_err());
        let token = format!("fg2.{}", URL_SAFE_NO_PAD.encode(&data));
        prop_assert!(ring().open(&token, "p").is_err());
    }

    /// Any locator either gets an id a client takes (at most 128 characters of header-safe
    /// printable ASCII) or is refused as too long, never cut; refusal happens exactly when the
    /// packed locator exceeds the budget.
    #[test]
    fn every_id_fits_or_is_refused(locator in ".{0,120}", principal in ".{0,300}") {
        let now = DateTime::from_timestamp_millis(1_764_670_000_123).expect("time");
        let tool = ToolTag::of("engine", "tool", "");
        match ring().seal(tool, now, &locator, &principal) {
            Ok(id) => {
                prop_assert!(id.len() <= ID_MAX, "{} characters", id.len());
                prop_assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
                prop_assert!(packed_len(&locator) <= LOCATOR_MAX);
            }
            Err(e) => prop_assert!(e.packed > LOCATOR_MAX && packed_len(&locator) == e.packed),
        }
    }

}

proptest! {
    #![proptest_config(cases(300))]

    /// Every edit of a valid handle is refused, unless it left the handle unchanged.
    #[test]
    fn edited_handles_never_open(
        task in task(),
        principal in ".{0,40}",
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let ring = ring();
        let token = task.seal(&ring, &principal);
        let mut edited = token.clone();
        for e in &edits {
            edited = apply(&edited, e);
        }
        match ring.open(&edited, &principal) {
            Ok(opened) => prop_assert!(edited == token && opened == task.opened(), "{edited:?} opened"),
            Err(_) => prop_assert_ne!(edited, token),
        }
    }

    /// A sealed handle opens, intact, for its principal and rotated keyrings, and for no one
    /// else; the id is stable and uses only header-safe characters.
    #[test]
    fn handles_open_only_for_their_principal(
        task in task(),
        principal in ".{0,40}",
        other in ".{0,40}",
    ) {
        let ring = ring();
        let token = task.seal(&ring, &principal);
        prop_assert!(token.len() <= ID_MAX);
        prop_assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
        prop_assert_eq!(&token, &task.seal(&ring, &principal));
        prop_assert_eq!(ring.open(&token, &principal), Ok(task.opened()));
        if other != principal {
            prop_assert_eq!(ring.open(&token, &other), Err(OpenError::Rejected));
        }
        let rotated = Keyring::new(
            HandleKey::new("k3", &[3; 32]).expect("key"),
            vec![HandleKey::new("k2", &[2; 32]).expect("key")],
        );
        prop_assert_eq!(rotated.open(&token, &principal), Ok(task.opened()));
    }

}

proptest! {
    #![proptest_config(cases(400))]

    /// A purpose other than the handle's never opens as a handle, whatever it seals.
    #[test]
    fn other_purposes_never_open_as_handles(
        purpose in "[a-z0-9]{1,6}",
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let ring = ring();
        let token = ring.seal_bytes(&purpose, &body, "p");
        prop_assert_eq!(ring.open_bytes(&purpose, &token, "p"), Ok(body));
        if purpose != "fg1" {
            prop_assert!(ring.open(&token, "p").is_err());
            let relabelled = token.replacen(&purpose, "fg1", 1);
            prop_assert!(ring.open(&relabelled, "p").is_err());
            let relabelled = token.replacen(&purpose, "fg2", 1);
            prop_assert!(ring.open(&relabelled, "p").is_err());
        }
    }

    /// Key specifications: parsed or refused with a message that never quotes a secret.
    #[test]
    fn key_specs_are_parsed_or_refused_without_echoing_secrets(
        entries in proptest::collection::vec(
            ("[ -~]{0,20}", prop_oneof![
                proptest::collection::vec(any::<u8>(), 32..=32),
                proptest::collection::vec(any::<u8>(), 0..64),
            ]),
            0..4,
        ),
        separator in prop_oneof![Just(":"), Just(""), Just("::")],
    ) {
        let spec = entries
            .iter()
            .map(|(kid, secret)| format!("{kid}{separator}{}", URL_SAFE_NO_PAD.encode(secret)))
            .collect::<Vec<_>>()
            .join(",");
        if let Err(e) = Keyring::parse(&spec) {
            let message = e.to_string();
            prop_assert!(!message.is_empty());
            for (_, secret) in &entries {
                let encoded = URL_SAFE_NO_PAD.encode(secret);
                if encoded.len() >= 8 {
                    prop_assert!(!message.contains(&encoded), "{message}");
                }
            }
        }
    }
}

/// A huge handle is refused without trouble (the transport bounds bodies; the opener must
/// not amplify them).
#[test]
fn a_megabyte_handle_is_refused() {
    let token = format!("fg1.k2.{}", "A".repeat(1 << 20));
    assert!(ring().open(&token, "p").is_err());
    let token = format!("fg2.{}", "A".repeat(1 << 20));
    assert!(ring().open(&token, "p").is_err());
    let dots = ".".repeat(1 << 20);
    assert!(ring().open(&dots, "p").is_err());
}
