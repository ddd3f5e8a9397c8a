//! The envelope both file formats share (checkpoints, training states): 8 magic bytes, a JSON
//! header with a u32 length, then parts each with a u64 length, then a CRC-32 of everything
//! before it (all little-endian). The checksum catches truncation and bit flips before anything
//! is parsed.

/// `magic` | header | `parts`, each length-prefixed, with the checksum.
pub fn write(magic: &[u8; 8], header: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let size = header.len() + parts.iter().map(|p| p.len() + 8).sum::<usize>();
    let mut out = Vec::with_capacity(size + 16);
    out.extend_from_slice(magic);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(header);
    for part in parts {
        out.extend_from_slice(&(part.len() as u64).to_le_bytes());
        out.extend_from_slice(part);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The header and the parts of a file [`write`] wrote with `magic`; `names` name them (the
/// header first) in errors, `what` names the format. Any corruption is an error message.
pub fn read<'a, const N: usize>(
    bytes: &'a [u8],
    magic: &[u8; 8],
    what: &str,
    names: [&str; N],
) -> Result<[&'a [u8]; N], String> {
    if bytes.len() < magic.len() + 4 + 8 * N.saturating_sub(1) + 4 {
        return Err(format!(
            "file too short ({} bytes) to be a {what}",
            bytes.len()
        ));
    }
    if !bytes.starts_with(magic) {
        return Err(format!("not a {what} (wrong magic bytes)"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err("checksum mismatch: the file is truncated or corrupt".into());
    }
    let mut at = magic.len();
    let mut out = [&body[..0]; N];
    for (i, name) in names.iter().enumerate() {
        let width = if i == 0 { 4 } else { 8 };
        let len = length(take(body, &mut at, width, name)?)?;
        out[i] = take(body, &mut at, len, name)?;
    }
    if at != body.len() {
        return Err(format!(
            "trailing bytes after the {}",
            names.last().unwrap_or(&"header")
        ));
    }
    Ok(out)
}

/// The `len` bytes of `body` at `*at`, moving `at` past them.
fn take<'a>(body: &'a [u8], at: &mut usize, len: usize, name: &str) -> Result<&'a [u8], String> {
    let part = body
        .get(*at..at.saturating_add(len))
        .ok_or_else(|| format!("{name} runs past the end"))?;
    *at += len;
    Ok(part)
}

/// A little-endian length of 4 or 8 bytes (one this platform cannot address is an error).
fn length(bytes: &[u8]) -> Result<usize, String> {
    let mut le = [0u8; 8];
    le[..bytes.len()].copy_from_slice(bytes);
    usize::try_from(u64::from_le_bytes(le)).map_err(|_| "a length beyond this platform".into())
}
