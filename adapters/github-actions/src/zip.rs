//! Reading one file out of an artifact's zip (stored or deflated entries, as
//! `actions/upload-artifact` writes them), without a zip library: the central directory gives
//! each entry's name and where its data starts.

/// Largest file read out of an artifact (a result, not a build output).
const MAX_FILE: usize = 8 << 20;

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize)
}

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
}

/// The content of the entry named `path` (a leading `./` or `/` is ignored).
///
/// # Errors
/// A message when the archive is not a zip, has no such entry, or the entry cannot be read.
pub(crate) fn read_entry(zip: &[u8], path: &str) -> Result<Vec<u8>, String> {
    let wanted = path.trim_start_matches("./").trim_start_matches('/');
    // End of central directory: signature 0x06054b50 within the last 64 KiB + 22 bytes.
    let floor = zip.len().saturating_sub(22 + 0xFFFF);
    let eocd = (floor..zip.len().saturating_sub(21))
        .rev()
        .find(|&i| zip.get(i..i + 4) == Some(&[0x50, 0x4b, 0x05, 0x06]))
        .ok_or("the artifact is not a zip archive")?;
    let count = u16_at(zip, eocd + 10).ok_or("truncated zip")?;
    let mut at = u32_at(zip, eocd + 16).ok_or("truncated zip")?;
    let mut names = Vec::new();
    for _ in 0..count {
        if zip.get(at..at + 4) != Some(&[0x50, 0x4b, 0x01, 0x02]) {
            return Err("corrupt zip central directory".into());
        }
        let method = u16_at(zip, at + 10).ok_or("truncated zip")?;
        let compressed = u32_at(zip, at + 20).ok_or("truncated zip")?;
        let size = u32_at(zip, at + 24).ok_or("truncated zip")?;
        let name_len = u16_at(zip, at + 28).ok_or("truncated zip")?;
        let extra_len = u16_at(zip, at + 30).ok_or("truncated zip")?;
        let comment_len = u16_at(zip, at + 32).ok_or("truncated zip")?;
        let local = u32_at(zip, at + 42).ok_or("truncated zip")?;
        let name = zip
            .get(at + 46..at + 46 + name_len)
            .map(String::from_utf8_lossy)
            .ok_or("truncated zip")?;
        if name == wanted {
            if size > MAX_FILE {
                return Err(format!("{wanted} is larger than {MAX_FILE} bytes"));
            }
            let lname = u16_at(zip, local + 26).ok_or("truncated zip")?;
            let lextra = u16_at(zip, local + 28).ok_or("truncated zip")?;
            let start = local + 30 + lname + lextra;
            let data = zip
                .get(start..start + compressed)
                .ok_or("truncated zip entry")?;
            return match method {
                0 => Ok(data.to_vec()),
                8 => miniz_oxide::inflate::decompress_to_vec_with_limit(data, MAX_FILE)
                    .map_err(|e| format!("cannot inflate {wanted}: {e:?}")),
                m => Err(format!(
                    "{wanted} uses zip method {m}, which flowgate cannot read"
                )),
            };
        }
        names.push(name.into_owned());
        at += 46 + name_len + extra_len + comment_len;
    }
    Err(format!(
        "the artifact has no file {wanted} (it has: {})",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zip with one deflated entry `r.json` = `{"a":1}`, as Python's zipfile writes it.
    fn sample() -> Vec<u8> {
        let data = br#"{"a":1}"#;
        let deflated = miniz_oxide::deflate::compress_to_vec(data, 6);
        let name = b"r.json";
        let mut z = Vec::new();
        let le16 = |v: usize| (v as u16).to_le_bytes();
        let le32 = |v: usize| (v as u32).to_le_bytes();
        z.extend([0x50, 0x4b, 0x03, 0x04]);
        z.extend(le16(20));
        z.extend(le16(0));
        z.extend(le16(8));
        z.extend([0; 8]); // time, date, crc (not checked)
        z.extend(le32(deflated.len()));
        z.extend(le32(data.len()));
        z.extend(le16(name.len()));
        z.extend(le16(0));
        z.extend(name);
        z.extend(&deflated);
        let cd = z.len();
        z.extend([0x50, 0x4b, 0x01, 0x02]);
        z.extend(le16(20));
        z.extend(le16(20));
        z.extend(le16(0));
        z.extend(le16(8));
        z.extend([0; 8]);
        z.extend(le32(deflated.len()));
        z.extend(le32(data.len()));
        z.extend(le16(name.len()));
        z.extend([0; 12]); // extra, comment, disk, attrs
        z.extend(le32(0));
        z.extend(name);
        let cd_len = z.len() - cd;
        z.extend([0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0]);
        z.extend(le16(1));
        z.extend(le16(1));
        z.extend(le32(cd_len));
        z.extend(le32(cd));
        z.extend(le16(0));
        z
    }

    #[test]
    fn reads_a_deflated_entry_and_names_what_is_missing() {
        let z = sample();
        assert_eq!(read_entry(&z, "r.json").expect("entry"), br#"{"a":1}"#);
        assert_eq!(read_entry(&z, "./r.json").expect("entry"), br#"{"a":1}"#);
        let e = read_entry(&z, "x.json").expect_err("missing");
        assert!(e.contains("r.json"), "{e}");
        assert!(read_entry(b"not a zip", "r.json").is_err());
    }
}
