//! Reading lists to the end, and writing URLs whose parts are encoded.
//!
//! Each API pages its own way: Google answers `nextPageToken` (opaque, base64 with `+`, `/`,
//! `=`), GitHub a `Link: <...>; rel="next"` header, GitLab `X-Next-Page`. [`all_pages`] follows
//! any of them with the page fetch the adapter gives, up to a bound, so no list is silently cut
//! at its first page and none runs forever.

use std::future::Future;

use flowgate_core::EngineError;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::HeaderMap;

/// RFC 3986 unreserved characters stay; everything else is percent-encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One path segment or query value, percent-encoded (`group/project` -> `group%2Fproject`,
/// `a+b=` -> `a%2Bb%3D`).
pub fn encode(component: &str) -> String {
    utf8_percent_encode(component, COMPONENT).to_string()
}

/// A fetched page: its items and the token of the next one.
pub type Page<T> = (Vec<T>, Option<String>);

/// Fetches pages until there is no next one, giving `fetch` each page's token (`None` for the
/// first), and returns every item.
///
/// # Errors
/// The first page fetch's error; `Unavailable` when the list goes on past `max_pages` (a
/// partial list would be taken for a whole one).
pub async fn all_pages<T, F, Fut>(
    engine: &'static str,
    max_pages: usize,
    mut fetch: F,
) -> Result<Vec<T>, EngineError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Page<T>, EngineError>>,
{
    let mut items = Vec::new();
    let mut token = None;
    for _ in 0..max_pages {
        let (page, next) = fetch(token.take()).await?;
        items.extend(page);
        match next.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => return Ok(items),
        }
    }
    Err(EngineError::Unavailable {
        engine,
        message: format!("the list goes on past {max_pages} pages; refusing a partial answer"),
        source: None,
    })
}

/// The `rel="next"` URL of a `Link` header (GitHub), if there is one.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"));
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        is_next.then(|| url.to_owned())
    })
}

/// The `X-Next-Page` header (GitLab): the next page number, absent or empty on the last page.
pub fn next_page_number(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("x-next-page")?.to_str().ok()?.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn components_are_encoded() {
        assert_eq!(encode("group/sub project"), "group%2Fsub%20project");
        assert_eq!(encode("Ab+/c=="), "Ab%2B%2Fc%3D%3D");
        assert_eq!(encode("a-b_c.d~"), "a-b_c.d~");
    }

    #[test]
    fn link_and_next_page_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::LINK,
            HeaderValue::from_static(
                "<https://api.example/x?page=1>; rel=\"prev\", <https://api.example/x?page=3>; rel=\"next\", <https://api.example/x?page=9>; rel=\"last\"",
            ),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://api.example/x?page=3")
        );
        h.insert("x-next-page", HeaderValue::from_static(""));
        assert_eq!(next_page_number(&h), None);
        h.insert("x-next-page", HeaderValue::from_static("4"));
        assert_eq!(next_page_number(&h).as_deref(), Some("4"));
        assert_eq!(next_link(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn follows_every_page_and_refuses_an_endless_list() {
        let all = all_pages("x", 10, |token| async move {
            let n: u32 = token.map_or(0, |t| t.parse().unwrap_or(99));
            let next = (n < 2).then(|| (n + 1).to_string());
            Ok((vec![n], next))
        })
        .await
        .expect("pages");
        assert_eq!(all, vec![0, 1, 2]);
        let endless = all_pages("x", 3, |_| async {
            Ok((vec![1], Some("again".to_owned())))
        })
        .await;
        assert!(matches!(endless, Err(EngineError::Unavailable { .. })));
    }
}
