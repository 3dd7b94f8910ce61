//! Reads safetensors headers (8-byte little-endian length, then a JSON table of tensors)
//! without touching the weights, to catch a truncated or empty export before a server
//! spends minutes finding out.

use std::io::Read;
use std::path::Path;

/// Tensors in one file, or why the file is not usable.
pub(crate) fn tensor_count(path: &Path) -> Result<usize, String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let size = file
        .metadata()
        .map_err(|e| format!("cannot stat: {e}"))?
        .len();
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| format!("only {size} bytes: no header"))?;
    let header_len = u64::from_le_bytes(len);
    // Real headers are kilobytes to a few MB; a huge length means this is not safetensors.
    if header_len > 100 << 20 || 8 + header_len > size {
        return Err(format!(
            "header length {header_len} does not fit in the file ({size} bytes): truncated or not safetensors"
        ));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)
        .map_err(|e| format!("cannot read the header: {e}"))?;
    let table: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| format!("header is not JSON: {e}"))?;
    let data = size - 8 - header_len;
    let mut count = 0;
    for (name, info) in &table {
        if name == "__metadata__" {
            continue;
        }
        let end = info
            .pointer("/data_offsets/1")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("tensor {name} has no data_offsets"))?;
        if end > data {
            return Err(format!(
                "tensor {name} ends at byte {end} but the file holds {data} bytes of data: truncated"
            ));
        }
        count += 1;
    }
    if count == 0 {
        return Err("no tensors in the header".into());
    }
    Ok(count)
}

/// Writes a minimal valid safetensors file (tests and fixtures).
pub fn write_fixture(path: &Path, tensors: &[(&str, usize)]) -> std::io::Result<()> {
    let mut table = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, bytes) in tensors {
        table.insert(
            name.to_string(),
            serde_json::json!({"dtype": "U8", "shape": [bytes], "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let header = serde_json::to_vec(&table).expect("json");
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.resize(out.len() + offset, 0);
    std::fs::write(path, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_truncated_and_empty_files_are_told_apart() {
        let dir = std::env::temp_dir().join(format!("sparkctl-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.safetensors");
        write_fixture(&good, &[("a", 16), ("b", 8)]).unwrap();
        assert_eq!(tensor_count(&good), Ok(2));
        let bytes = std::fs::read(&good).unwrap();
        let cut = dir.join("cut.safetensors");
        std::fs::write(&cut, &bytes[..bytes.len() - 4]).unwrap();
        assert!(tensor_count(&cut).unwrap_err().contains("truncated"));
        let empty = dir.join("empty.safetensors");
        write_fixture(&empty, &[]).unwrap();
        assert!(tensor_count(&empty).unwrap_err().contains("no tensors"));
        std::fs::write(
            dir.join("junk.safetensors"),
            b"\xff\xff\xff\xff\xff\xff\xff\x7f",
        )
        .unwrap();
        assert!(tensor_count(&dir.join("junk.safetensors")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
