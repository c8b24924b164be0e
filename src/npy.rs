//! NumPy `.npy` (format 1.0) writer for float32 arrays (C order) — the whole format we
//! need is a fixed header, so it is written here rather than pulled in.

use std::io::Write;
use std::path::Path;

/// The bytes of a `.npy` file holding `data` as a little-endian float32 array of `shape`
/// (C order: the last index varies fastest).
pub fn encode_f32_shaped(data: &[f32], shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let dims = if dims.len() == 1 {
        format!("{},", dims[0])
    } else {
        dims.join(", ")
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
    // Magic (6) + version (2) + length (2) + header + '\n' must be a multiple of 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + 4 * data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

pub fn write_f32_shaped(path: &Path, data: &[f32], shape: &[usize]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(&encode_f32_shaped(data, shape))?;
    f.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_padded_to_64_bytes_and_data_follows_little_endian() {
        let bytes = encode_f32_shaped(&[1.0, -2.5], &[2]);
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
        assert!(header.contains("'descr': '<f4'") && header.contains("'shape': (2,)"));
        assert!(header.ends_with('\n'));
        let plane = encode_f32_shaped(&[0.0; 6], &[2, 3]);
        let hlen = u16::from_le_bytes([plane[8], plane[9]]) as usize;
        assert!(
            std::str::from_utf8(&plane[10..10 + hlen])
                .unwrap()
                .contains("'shape': (2, 3)")
        );
        assert_eq!(
            &bytes[10 + hlen..],
            [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat()
        );
    }
}
