//! A strict reader for NumPy `.npy` files, written for hostile input.
//!
//! The format (numpy's `format.py`): the magic bytes `\x93NUMPY`, a major and
//! a minor version byte, the header length (2 bytes little-endian in version
//! 1, 4 bytes in versions 2 and 3), the header — one Python dict literal such
//! as `{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }` padded
//! with spaces and ended by a newline — and then the raw data.
//!
//! The header is parsed here directly, by a single left-to-right pass with no
//! backtracking and no nesting (structured dtypes, whose `descr` is a list,
//! are refused at the first `[`), so the time to read any header is linear in
//! its length, which is itself bounded by [`MAX_HEADER_LEN`]. Only the keys
//! `descr`, `fortran_order` and `shape` are allowed, each exactly once. The
//! data section must hold exactly the number of bytes the shape and dtype
//! need: a shorter section and trailing bytes after the array are errors.
//! The element count is computed with overflow checks, and the buffer for
//! the elements is reserved fallibly, so a huge shape is an error, never an
//! abort.

use crate::ir::Scalar;
use crate::runtime::{ArrayData, Value};

/// Longest header accepted, in bytes. numpy itself refuses headers over
/// 10,000 bytes by default (`max_header_size`); real headers are under 200.
pub const MAX_HEADER_LEN: usize = 65_536;

/// Most axes accepted in a shape (numpy's own limit is 64).
pub const MAX_RANK: usize = 64;

const MAGIC: &[u8] = b"\x93NUMPY";

/// What the header says.
#[derive(Debug, PartialEq)]
pub struct Header {
    pub elem: Scalar,
    /// Byte order of multi-byte elements.
    pub big_endian: bool,
    pub fortran_order: bool,
    pub shape: Vec<usize>,
    /// Offset of the first data byte in the file.
    pub data_offset: usize,
}

/// Decode a whole `.npy` file held in memory. `name` names the file in
/// messages. A 0-d array gives a scalar.
pub fn decode(name: &str, bytes: &[u8]) -> Result<Value, String> {
    let h = parse_header(bytes).map_err(|e| format!("{name}: not a valid .npy file: {e}"))?;
    let count = h
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("{name}: the shape {} has too many elements", shape_tuple(&h.shape)))?;
    let size = elem_size(h.elem);
    let data = &bytes[h.data_offset..];
    let need = count.checked_mul(size);
    match need {
        Some(n) if n == data.len() => {}
        Some(n) if n > data.len() => {
            return Err(format!(
                "{name}: the data section is too short: the shape {} of {} needs {n} bytes, the file holds {}",
                shape_tuple(&h.shape),
                npy_name(h.elem),
                data.len()
            ));
        }
        Some(n) => {
            return Err(format!(
                "{name}: {} bytes of trailing data after the array (the shape {} of {} needs {n} bytes)",
                data.len() - n,
                shape_tuple(&h.shape),
                npy_name(h.elem)
            ));
        }
        None => {
            return Err(format!("{name}: the shape {} of {} is too large", shape_tuple(&h.shape), npy_name(h.elem)));
        }
    }
    let oom = |e: std::collections::TryReserveError| format!("{name}: not enough memory for {count} elements: {e}");
    let out = match h.elem {
        Scalar::F64 => ArrayData::F64(convert(data, count, oom, |b| f64::from_bits(word8(b, h.big_endian)))?.into()),
        Scalar::F32 => ArrayData::F32(convert(data, count, oom, |b| f32::from_bits(word4(b, h.big_endian)))?.into()),
        Scalar::I64 => ArrayData::I64(convert(data, count, oom, |b| word8(b, h.big_endian) as i64)?.into()),
        Scalar::I32 => ArrayData::I32(convert(data, count, oom, |b| word4(b, h.big_endian) as i32)?.into()),
        Scalar::Bool => {
            if let Some(k) = data.iter().position(|&b| b > 1) {
                return Err(format!("{name}: element {k} of a bool array is the byte {}, not 0 or 1", data[k]));
            }
            ArrayData::Bool(convert(data, count, oom, |b| b[0] == 1)?.into())
        }
    };
    if h.shape.is_empty() {
        return Ok(out.get(0));
    }
    // Fortran order (column-major) matters only with two or more axes longer than 1.
    let out = if h.fortran_order && h.shape.iter().filter(|&&d| d > 1).count() > 1 {
        let t = |e| format!("{name}: not enough memory to reorder {count} elements: {e}");
        match &out {
            ArrayData::F64(v) => ArrayData::F64(fortran_to_c(v, &h.shape).map_err(t)?.into()),
            ArrayData::F32(v) => ArrayData::F32(fortran_to_c(v, &h.shape).map_err(t)?.into()),
            ArrayData::I64(v) => ArrayData::I64(fortran_to_c(v, &h.shape).map_err(t)?.into()),
            ArrayData::I32(v) => ArrayData::I32(fortran_to_c(v, &h.shape).map_err(t)?.into()),
            ArrayData::Bool(v) => ArrayData::Bool(fortran_to_c(v, &h.shape).map_err(t)?.into()),
        }
    } else {
        out
    };
    Ok(Value::array(h.shape, out))
}

/// Reorder column-major (Fortran) data of `shape` into row-major order.
fn fortran_to_c<T: Copy>(src: &[T], shape: &[usize]) -> Result<Vec<T>, std::collections::TryReserveError> {
    let r = shape.len();
    // Strides of the Fortran layout: the first axis varies fastest. None
    // overflows: each is at most the element count, checked by the caller.
    let mut stride = vec![1usize; r];
    for k in 1..r {
        stride[k] = stride[k - 1] * shape[k - 1];
    }
    let mut out = Vec::new();
    out.try_reserve_exact(src.len())?;
    let mut idx = vec![0usize; r];
    let mut off = 0usize;
    for _ in 0..src.len() {
        out.push(src[off]);
        // Advance the row-major multi-index, last axis fastest.
        for k in (0..r).rev() {
            idx[k] += 1;
            off += stride[k];
            if idx[k] < shape[k] {
                break;
            }
            off -= stride[k] * shape[k];
            idx[k] = 0;
        }
    }
    Ok(out)
}

fn word8(b: &[u8], big: bool) -> u64 {
    let a: [u8; 8] = b.try_into().expect("8 bytes");
    if big { u64::from_be_bytes(a) } else { u64::from_le_bytes(a) }
}

fn word4(b: &[u8], big: bool) -> u32 {
    let a: [u8; 4] = b.try_into().expect("4 bytes");
    if big { u32::from_be_bytes(a) } else { u32::from_le_bytes(a) }
}

fn convert<T>(data: &[u8], count: usize, oom: impl Fn(std::collections::TryReserveError) -> String, f: impl Fn(&[u8]) -> T) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(count).map_err(oom)?;
    if let Some(size) = data.len().checked_div(count) {
        v.extend(data.chunks_exact(size).map(f));
    }
    Ok(v)
}

pub fn elem_size(s: Scalar) -> usize {
    match s {
        Scalar::F64 | Scalar::I64 => 8,
        Scalar::F32 | Scalar::I32 => 4,
        Scalar::Bool => 1,
    }
}

pub fn npy_name(s: Scalar) -> &'static str {
    match s {
        Scalar::F64 => "float64",
        Scalar::F32 => "float32",
        Scalar::I64 => "int64",
        Scalar::I32 => "int32",
        Scalar::Bool => "bool",
    }
}

/// A shape as Python writes it: `()`, `(3,)`, `(2, 3)`.
pub fn shape_tuple(dims: &[usize]) -> String {
    match dims {
        [d] => format!("({d},)"),
        _ => format!("({})", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// Check the preamble and parse the header dict.
pub fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err("it does not start with the magic string \\x93NUMPY".to_string());
    }
    let (major, minor) = match bytes.get(6..8) {
        Some(&[a, b]) => (a, b),
        _ => return Err("the file ends inside the version number".to_string()),
    };
    let (len_bytes, utf8) = match (major, minor) {
        (1, 0) => (2, false),
        (2, 0) => (4, false),
        (3, 0) => (4, true),
        _ => {
            return Err(format!("unsupported format version {major}.{minor} (1.0, 2.0 and 3.0 are read)"));
        }
    };
    let start = 8 + len_bytes;
    let len = match bytes.get(8..start) {
        Some(b) if len_bytes == 2 => u16::from_le_bytes([b[0], b[1]]) as usize,
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
        None => return Err("the file ends inside the header length".to_string()),
    };
    if len > MAX_HEADER_LEN {
        return Err(format!("the header is {len} bytes long; at most {MAX_HEADER_LEN} are accepted"));
    }
    let Some(text) = bytes.get(start..start + len) else {
        return Err(format!("the header should be {len} bytes long but the file ends after {}", bytes.len() - start));
    };
    let text = if utf8 {
        std::str::from_utf8(text).map_err(|_| "the header is not valid UTF-8".to_string())?
    } else {
        // Versions 1 and 2 are latin-1; anything outside ASCII cannot be part of a valid header.
        std::str::from_utf8(text).ok().filter(|t| t.is_ascii()).ok_or("the header is not ASCII text")?
    };
    let dict = HeaderParser { s: text.as_bytes(), pos: 0 }.dict()?;
    Ok(Header { elem: dict.0, big_endian: dict.1, fortran_order: dict.2, shape: dict.3, data_offset: start + len })
}

/// A one-pass parser of the header dict literal.
struct HeaderParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl HeaderParser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn found(&mut self) -> String {
        match self.peek() {
            None => "the end of the header".to_string(),
            Some(c) if c.is_ascii_graphic() => format!("`{}`", c as char),
            Some(c) => format!("the byte 0x{c:02x}"),
        }
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("in the header, expected {what}, found {}", self.found()))
        }
    }

    /// A quoted string (single or double quotes, no escapes: none of the
    /// allowed keys or dtype strings need one).
    fn string(&mut self, what: &str) -> Result<String, String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(format!("in the header, expected {what} (a quoted string), found {}", self.found()));
            }
        };
        let start = self.pos + 1;
        let Some(len) = self.s[start..].iter().position(|&c| c == q || c == b'\\') else {
            return Err("in the header, a string is not closed".to_string());
        };
        if self.s[start + len] == b'\\' {
            return Err("in the header, escapes in strings are not supported".to_string());
        }
        self.pos = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn word(&mut self) -> &str {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_alphanumeric() {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos]).expect("ASCII")
    }

    fn bool(&mut self) -> Result<bool, String> {
        match self.word() {
            "True" => Ok(true),
            "False" => Ok(false),
            "" => Err(format!("in the header, `fortran_order` should be True or False, found {}", self.found())),
            w => Err(format!("in the header, `fortran_order` should be True or False, found `{w}`")),
        }
    }

    /// `()`, `(3,)`, `(2, 3)`, `(2, 3,)`; Python 2's `3L` is accepted.
    fn shape(&mut self) -> Result<Vec<usize>, String> {
        self.expect(b'(', "`(` to start the shape")?;
        let mut dims = vec![];
        loop {
            if self.peek() == Some(b')') {
                self.pos += 1;
                break;
            }
            let w = self.word().to_string();
            let digits = w.strip_suffix('L').unwrap_or(&w);
            if digits.is_empty() {
                return Err(format!("in the header, the shape should hold non-negative integers, found {}", self.found()));
            }
            if !digits.bytes().all(|c| c.is_ascii_digit()) {
                return Err(format!("in the header, the shape should hold non-negative integers, found `{w}`"));
            }
            let d: usize = digits.parse().map_err(|_| format!("in the header, the axis length {digits} is too large"))?;
            dims.push(d);
            if dims.len() > MAX_RANK {
                return Err(format!("in the header, the shape has more than {MAX_RANK} axes"));
            }
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b')') => {
                    // `(3)` is not a tuple in Python.
                    if dims.len() == 1 {
                        return Err("in the header, a 1-d shape must be written `(n,)`".to_string());
                    }
                    self.pos += 1;
                    break;
                }
                _ => {
                    return Err(format!("in the header, expected `,` or `)` in the shape, found {}", self.found()));
                }
            }
        }
        Ok(dims)
    }

    fn descr(&mut self) -> Result<(Scalar, bool), String> {
        if self.peek() == Some(b'[') {
            return Err("structured dtypes (a list as `descr`) are not supported; use float64, float32, int64, int32 or bool".to_string());
        }
        let d = self.string("the dtype as `descr`")?;
        let (order, code) = match d.as_bytes().first() {
            Some(b'<' | b'>' | b'|' | b'=') => (d.as_bytes()[0], &d[1..]),
            _ => (b'=', d.as_str()),
        };
        let elem = match code {
            "f8" => Scalar::F64,
            "f4" => Scalar::F32,
            "i8" => Scalar::I64,
            "i4" => Scalar::I32,
            "b1" | "?" => Scalar::Bool,
            _ => {
                return Err(format!("unsupported dtype '{d}' (float64, float32, int64, int32 and bool are read)"));
            }
        };
        let big = order == b'>' || (order == b'=' && cfg!(target_endian = "big"));
        Ok((elem, big))
    }

    fn dict(mut self) -> Result<(Scalar, bool, bool, Vec<usize>), String> {
        self.expect(b'{', "`{` to start the header dict")?;
        let mut descr = None;
        let mut fortran = None;
        let mut shape = None;
        loop {
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            let key = self.string("a key")?;
            self.expect(b':', "`:` after a key")?;
            let dup = match key.as_str() {
                "descr" => descr.replace(self.descr()?).is_some(),
                "fortran_order" => fortran.replace(self.bool()?).is_some(),
                "shape" => shape.replace(self.shape()?).is_some(),
                other => {
                    let short: String = other.chars().take(40).collect();
                    return Err(format!("unexpected key '{short}' in the header (only 'descr', 'fortran_order' and 'shape' are allowed)"));
                }
            };
            if dup {
                return Err(format!("the key '{key}' appears twice in the header"));
            }
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => {
                    return Err(format!("in the header, expected `,` or `}}` after a value, found {}", self.found()));
                }
            }
        }
        if self.peek().is_some() {
            return Err(format!("in the header, unexpected {} after the dict", self.found()));
        }
        let missing = |k: &str| format!("the header has no '{k}' key");
        let (elem, big) = descr.ok_or_else(|| missing("descr"))?;
        Ok((elem, big, fortran.ok_or_else(|| missing("fortran_order"))?, shape.ok_or_else(|| missing("shape"))?))
    }
}

/// Encode an array (row-major data of `shape`) as a version 1.0 `.npy`
/// file, little-endian, with the header padded so the data starts at a
/// multiple of 64 bytes, as numpy writes it. A version 2.0 header is used
/// only if the header would not fit in 65,535 bytes (it never does for the
/// ranks arden has).
pub fn encode(shape: &[usize], data: &ArrayData) -> Vec<u8> {
    let descr = match data.scalar() {
        Scalar::F64 => "<f8",
        Scalar::F32 => "<f4",
        Scalar::I64 => "<i8",
        Scalar::I32 => "<i4",
        Scalar::Bool => "|b1",
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {}, }}", shape_tuple(shape));
    // Magic (6) + version (2) + length (2) + dict + padding + '\n'.
    let unpadded = 10 + dict.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    dict.extend(std::iter::repeat_n(' ', pad));
    dict.push('\n');
    let mut out = Vec::with_capacity(10 + dict.len() + data.len() * elem_size(data.scalar()));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    match data {
        ArrayData::F64(xs) => xs.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::F32(xs) => xs.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::I64(xs) => xs.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::I32(xs) => xs.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::Bool(xs) => out.extend(xs.iter().map(|&b| b as u8)),
    }
    out
}
