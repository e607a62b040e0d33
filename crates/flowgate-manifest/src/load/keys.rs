//! Where each key inside a tool's `target:` block was written, so an engine's complaint about
//! one key (a typo, a wrong type) is reported at that key's own line and column rather than at
//! the block's first line.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// The dotted path of every mapping key below some node (`inputs.approve.message`), with the
/// place the key was written. Sequences are walked by index (`command.0`).
#[derive(Default)]
pub(super) struct KeyPlaces(pub(super) BTreeMap<String, Location>);

impl KeyPlaces {
    fn nest(&mut self, prefix: &str, inner: KeyPlaces) {
        for (path, at) in inner.0 {
            self.0.insert(format!("{prefix}.{path}"), at);
        }
    }
}

impl<'de> Deserialize<'de> for KeyPlaces {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PlacesVisitor)
    }
}

struct PlacesVisitor;

impl<'de> Visitor<'de> for PlacesVisitor {
    type Value = KeyPlaces;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyPlaces, A::Error> {
        let mut places = KeyPlaces::default();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let inner: Spanned<KeyPlaces> = map.next_value()?;
            places.0.insert(key.value.clone(), key.referenced);
            places.nest(&key.value, inner.value);
        }
        Ok(places)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyPlaces, A::Error> {
        let mut places = KeyPlaces::default();
        let mut index = 0usize;
        while let Some(item) = seq.next_element::<Spanned<KeyPlaces>>()? {
            let path = index.to_string();
            places.0.insert(path.clone(), item.referenced);
            places.nest(&path, item.value);
            index += 1;
        }
        Ok(places)
    }

    fn visit_bool<E>(self, _: bool) -> Result<KeyPlaces, E> {
        Ok(KeyPlaces::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<KeyPlaces, E> {
        Ok(KeyPlaces::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<KeyPlaces, E> {
        Ok(KeyPlaces::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<KeyPlaces, E> {
        Ok(KeyPlaces::default())
    }
    fn visit_str<E>(self, _: &str) -> Result<KeyPlaces, E> {
        Ok(KeyPlaces::default())
    }
    fn visit_unit<E>(self) -> Result<KeyPlaces, E> {
        Ok(KeyPlaces::default())
    }
    fn visit_none<E>(self) -> Result<KeyPlaces, E> {
        Ok(KeyPlaces::default())
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<KeyPlaces, D::Error> {
        KeyPlaces::deserialize(d)
    }
}

/// The second, lenient read of a manifest: only the targets' key places, everything else
/// ignored (the strict read has already checked it).
#[derive(Deserialize)]
pub(super) struct TargetPlaces {
    pub(super) tools: Vec<ToolPlaces>,
}

#[derive(Deserialize)]
pub(super) struct ToolPlaces {
    #[serde(default)]
    pub(super) target: Option<KeyPlaces>,
}
