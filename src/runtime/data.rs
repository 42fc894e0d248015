//! JSON and NumPy `.npy` data in and out (LANGUAGE.md §10).
//!
//! - [`value_from_json`] converts a parsed JSON value to a [`Value`], guided
//!   by the expected surface [`Shape`] of a parameter: the element type picks
//!   the scalar kind, the rank says how deeply arrays nest, tuples are JSON
//!   arrays with one element per component.
//! - [`parse_arg`] reads one command-line argument: JSON text, `@file.json`
//!   or `@file.npy`.
//! - [`read_npy`] / [`write_npy`] read and write `.npy` files (dtypes
//!   float64, float32, int64, int32 and bool; C or Fortran order; 0-d files
//!   are scalars).
//!
//! Non-finite floats: JSON has no NaN or infinities. Wherever a float is
//! expected, the JSON strings `"NaN"`, `"Infinity"` and `"-Infinity"` are
//! accepted, and in JSON *text* (arguments and `.json` files) the bare tokens
//! `NaN`, `Infinity` and `-Infinity` outside of strings are accepted too
//! (they are what [`Value::to_json`] and Python's `json` module write), so
//! results can be fed back as arguments.
//!
//! Empty arrays: `[]` for a parameter of type `[n][m]f64` has no rows to
//! tell its inner sizes; inner axes whose size in the type is a constant
//! take that constant, the others are `0` (the data is empty either way).

use crate::ir::{Scalar, Shape, Type};
use crate::runtime::{ArrayData, Value};
use serde_json::Value as Json;
use std::path::Path;

/// Convert JSON to a value of the expected shape.
pub fn value_from_json(json: &Json, shape: &Shape) -> Result<Value, String> {
    match shape {
        Shape::Leaf(ty) => leaf_from_json(json, ty),
        Shape::Tuple(comps) => match json {
            Json::Array(items) if items.len() == comps.len() => {
                let mut vals = Vec::with_capacity(comps.len());
                for (k, (item, comp)) in items.iter().zip(comps).enumerate() {
                    vals.push(value_from_json(item, comp).map_err(|e| format!("tuple component {k}: {e}"))?);
                }
                Ok(Value::Tuple(vals))
            }
            Json::Array(items) => Err(format!(
                "expected a tuple of {} as a JSON array of {} element{}, got an array of {} element{}",
                shape_desc(shape),
                comps.len(),
                plural(comps.len()),
                items.len(),
                plural(items.len())
            )),
            other => Err(format!(
                "expected a tuple of {} as a JSON array of {} element{}, got {}",
                shape_desc(shape),
                comps.len(),
                plural(comps.len()),
                describe_json(other)
            )),
        },
    }
}

/// Parse one argument: JSON text, `@path.json` or `@path.npy`.
pub fn parse_arg(spec: &str, shape: &Shape) -> Result<Value, String> {
    if let Some(path) = spec.strip_prefix('@') {
        let p = Path::new(path);
        if path.is_empty() {
            return Err("`@` must be followed by a file name (`@data.json` or `@data.npy`)".to_string());
        }
        if is_npy(p) {
            let ty = match shape {
                Shape::Leaf(ty) => ty,
                Shape::Tuple(_) => {
                    return Err(format!(
                        "a .npy file holds one array, but a tuple of {} is expected; pass the tuple as a JSON array of its components",
                        shape_desc(shape)
                    ));
                }
            };
            let v = read_npy(p)?;
            check_npy_value(path, &v, ty)?;
            Ok(v)
        } else {
            let bytes = read_input_file(p)?;
            let text = String::from_utf8(bytes).map_err(|e| {
                let at = e.utf8_error().valid_up_to();
                format!("cannot parse {path} as JSON: invalid UTF-8 at byte {at}")
            })?;
            // A byte-order mark (as some Windows editors write) is skipped.
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            json_text_value(text, shape, &format!("{path} as JSON"))
        }
    } else {
        json_text_value(spec, shape, "argument as JSON")
    }
}

/// JSON text to a value, streamed (no JSON tree in memory).
fn json_text_value(text: &str, shape: &Shape, what: &str) -> Result<Value, String> {
    use crate::runtime::json_stream::{TextError, value_from_json_text};
    value_from_json_text(text, shape).map_err(|e| match e {
        TextError::Syntax(e) => format!("cannot parse {what}: {e}"),
        TextError::Value(m) => m,
    })
}

/// Parse JSON text, also accepting the bare tokens `NaN`, `Infinity` and
/// `-Infinity` outside of strings (they become the strings of those names,
/// which [`value_from_json`] accepts as floats).
pub fn parse_json_text(text: &str) -> Result<Json, String> {
    serde_json::from_str(&quote_non_finite(text)).map_err(|e| e.to_string())
}

pub(crate) fn quote_non_finite(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    let word_char = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while i < text.len() {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if i == 0 || !word_char(bytes[i - 1]) {
            let mut matched = None;
            // `-0` is a valid JSON number, but serde_json reads it as the
            // float -0.0, which would refuse it for integer parameters: it
            // goes through as the string "-0", read as 0 or -0.0.
            if text[i..].starts_with("-0") && bytes.get(i + 2).is_none_or(|&c| !(c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E'))) {
                out.push_str("\"-0\"");
                i += 2;
                continue;
            }
            for tok in ["-Infinity", "Infinity", "NaN"] {
                if text[i..].starts_with(tok) && bytes.get(i + tok.len()).is_none_or(|&c| !word_char(c)) {
                    matched = Some(tok);
                    break;
                }
            }
            if let Some(tok) = matched {
                out.push('"');
                out.push_str(tok);
                out.push('"');
                i += tok.len();
                continue;
            }
        }
        // Copy one whole UTF-8 character.
        let len = utf8_len(b);
        out.push_str(&text[i..i + len]);
        i += len;
    }
    out
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

fn is_npy(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("npy"))
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// "a 2-d array of f64", "an f64 number", "a bool (true or false)".
pub(crate) fn type_desc(ty: &Type) -> String {
    if ty.rank() == 0 { scalar_desc(ty.elem).to_string() } else { format!("a {}-d array of {}", ty.rank(), ty.elem.name()) }
}

fn scalar_desc(s: Scalar) -> &'static str {
    match s {
        Scalar::F64 => "a number (f64)",
        Scalar::F32 => "a number (f32)",
        Scalar::I64 => "an integer (i64)",
        Scalar::I32 => "an integer (i32)",
        Scalar::Bool => "true or false (bool)",
    }
}

pub(crate) fn shape_desc(shape: &Shape) -> String {
    match shape {
        Shape::Leaf(ty) => {
            let dims: String = (0..ty.rank()).map(|_| "[]").collect();
            format!("{dims}{}", ty.elem.name())
        }
        Shape::Tuple(ts) => format!("({})", ts.iter().map(shape_desc).collect::<Vec<_>>().join(", ")),
    }
}

/// What a JSON value is, for messages: "a number", "a 2-d array", ...
pub(crate) fn describe_json(j: &Json) -> String {
    match j {
        Json::Null => "null".to_string(),
        Json::Bool(b) => format!("`{b}`"),
        Json::Number(n) => format!("the number {n}"),
        Json::String(s) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity" | "-0") => s.clone(),
        Json::String(s) => {
            let short: String = s.chars().take(40).collect();
            format!("the string {:?}", if short.len() < s.len() { format!("{short}…") } else { short })
        }
        Json::Object(_) => "an object".to_string(),
        Json::Array(xs) if xs.is_empty() => "an empty array".to_string(),
        Json::Array(_) => format!("a {}-d array", json_depth(j)),
    }
}

/// Nesting depth of arrays, following first elements.
pub(crate) fn json_depth(j: &Json) -> usize {
    let mut depth = 0;
    let mut cur = j;
    while let Json::Array(xs) = cur {
        depth += 1;
        match xs.first() {
            Some(x) => cur = x,
            None => break,
        }
    }
    depth
}

fn leaf_from_json(json: &Json, ty: &Type) -> Result<Value, String> {
    let rank = ty.rank();
    if rank == 0 {
        let mut data = ArrayData::with_capacity(ty.elem, 1);
        push_scalar(json, ty.elem, &mut data)?;
        return Ok(data.get(0));
    }
    if !json.is_array() {
        return Err(format!("expected {}, got {}", type_desc(ty), describe_json(json)));
    }
    // Sizes from the first element at every level.
    let mut dims = Vec::with_capacity(rank);
    let mut cur = json;
    for d in 0..rank {
        match cur {
            Json::Array(xs) => {
                dims.push(xs.len());
                match xs.first() {
                    Some(x) => cur = x,
                    None => {
                        // Empty: inner sizes from the type where constant, else 0.
                        for s in &ty.shape[d + 1..] {
                            dims.push(s.as_const().filter(|&c| c >= 0).map_or(0, |c| c as usize));
                        }
                        break;
                    }
                }
            }
            _ => {
                return Err(format!("expected {}, got a {d}-d array", type_desc(ty)));
            }
        }
    }
    if dims.iter().all(|&d| d > 0) && cur.is_array() {
        return Err(format!("expected {}, got a {}-d array", type_desc(ty), rank + json_depth(cur)));
    }
    let total = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or("array too large")?;
    let mut data = ArrayData::with_capacity(ty.elem, total.min(1 << 24));
    let mut path = Vec::with_capacity(rank);
    fill(json, 0, &dims, ty.elem, &mut path, &mut data)?;
    Ok(Value::array(dims, data))
}

pub(crate) fn path_str(path: &[usize]) -> String {
    path.iter().map(|i| format!("[{i}]")).collect()
}

/// "row 2" at the top level, "row [1][2]" deeper.
pub(crate) fn row_name(path: &[usize]) -> String {
    match path {
        [i] => format!("row {i}"),
        _ => format!("row {}", path_str(path)),
    }
}

fn fill(j: &Json, d: usize, dims: &[usize], elem: Scalar, path: &mut Vec<usize>, data: &mut ArrayData) -> Result<(), String> {
    if d == dims.len() {
        return push_scalar(j, elem, data).map_err(|e| format!("{e} (at {})", path_str(path)));
    }
    match j {
        Json::Array(xs) if xs.len() == dims[d] => {
            for (i, x) in xs.iter().enumerate() {
                path.push(i);
                fill(x, d + 1, dims, elem, path, data)?;
                path.pop();
            }
            Ok(())
        }
        Json::Array(xs) => Err(format!("ragged array: {} has length {}, expected {}", row_name(path), xs.len(), dims[d])),
        other => Err(format!("ragged array: {} is {}, expected an array of length {}", row_name(path), describe_json(other), dims[d])),
    }
}

fn json_float(j: &Json) -> Option<f64> {
    match j {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" | "nan" => Some(f64::NAN),
            "Infinity" | "inf" | "+Infinity" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            "-0" => Some(-0.0),
            _ => None,
        },
        _ => None,
    }
}

pub(crate) fn push_scalar(j: &Json, elem: Scalar, data: &mut ArrayData) -> Result<(), String> {
    let bad = || format!("expected {}, got {}", scalar_desc(elem), describe_json(j));
    match (elem, data) {
        (Scalar::F64, ArrayData::F64(v)) => v.push(json_float(j).ok_or_else(bad)?),
        (Scalar::F32, ArrayData::F32(v)) => {
            let x = json_float(j).ok_or_else(bad)?;
            let y = x as f32;
            if x.is_finite() && !y.is_finite() {
                return Err(format!("the number {x:e} is out of range for f32 (the largest finite f32 is {:e})", f32::MAX));
            }
            v.push(y)
        }
        (Scalar::I64, ArrayData::I64(v)) => v.push(json_int(j, elem)?),
        (Scalar::I32, ArrayData::I32(v)) => {
            let x = json_int(j, elem)?;
            v.push(i32::try_from(x).map_err(|_| format!("the integer {x} does not fit in i32"))?);
        }
        (Scalar::Bool, ArrayData::Bool(v)) => match j {
            Json::Bool(b) => v.push(*b),
            _ => return Err(bad()),
        },
        _ => unreachable!("buffer of the element type"),
    }
    Ok(())
}

fn json_int(j: &Json, elem: Scalar) -> Result<i64, String> {
    match j {
        Json::Number(n) => {
            if let Some(x) = n.as_i64() {
                Ok(x)
            } else if n.is_u64() {
                Err(format!("the integer {n} does not fit in {}", elem.name()))
            } else if n.as_f64().is_some_and(|x| x.fract() == 0.0 && x.abs() >= 9_223_372_036_854_775_808.0) {
                // An integer beyond i64, which serde_json read as a float.
                Err(format!("the number {n} does not fit in {}", elem.name()))
            } else {
                Err(format!("expected an integer, got {n}"))
            }
        }
        Json::String(s) if s == "-0" => Ok(0),
        _ => Err(format!("expected {}, got {}", scalar_desc(elem), describe_json(j))),
    }
}

// ---------------------------------------------------------------- files

/// Largest input file (`--arg @file.json`, `--arg @file.npy`) read by
/// default: 1 GiB. The environment variable named by [`MAX_INPUT_ENV`]
/// changes it (a number of bytes, e.g. `ARDEN_MAX_INPUT_BYTES=4294967296`).
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 1 << 30;

/// The environment variable that overrides [`DEFAULT_MAX_INPUT_BYTES`].
pub const MAX_INPUT_ENV: &str = "ARDEN_MAX_INPUT_BYTES";

/// The input size limit in force: [`MAX_INPUT_ENV`] if set (a byte count),
/// else [`DEFAULT_MAX_INPUT_BYTES`].
pub fn max_input_bytes() -> Result<u64, String> {
    match std::env::var(MAX_INPUT_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_MAX_INPUT_BYTES),
        Ok(v) => v.trim().parse::<u64>().map_err(|_| format!("{MAX_INPUT_ENV} must be a number of bytes, e.g. {MAX_INPUT_ENV}=4294967296; it is `{v}`")),
        Err(e) => Err(format!("{MAX_INPUT_ENV}: {e}")),
    }
}

/// Read a whole input file, refusing anything that is not a regular file
/// (`/dev/zero`, a FIFO, a directory) and files over [`max_input_bytes`],
/// with a message naming the file. The buffer is reserved fallibly, so
/// lack of memory is an error too.
pub fn read_input_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let name = path.display();
    let limit = max_input_bytes()?;
    // Check before opening: opening a FIFO blocks until a writer appears.
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let not_regular = |m: &std::fs::Metadata| {
        let kind = if m.is_dir() { "a directory" } else { "not a regular file (a device, pipe or socket)" };
        format!("cannot read {name}: it is {kind}; pass a regular file")
    };
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let too_big = |size: u64| format!("cannot read {name}: it is {size} bytes, over the input limit of {limit} bytes (set {MAX_INPUT_ENV} to raise it)");
    if meta.len() > limit {
        return Err(too_big(meta.len()));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    // The file may have been replaced between the two looks.
    let meta = file.metadata().map_err(|e| format!("cannot read {name}: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    if meta.len() > limit {
        return Err(too_big(meta.len()));
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(meta.len() as usize).map_err(|e| format!("cannot read {name}: not enough memory for {} bytes: {e}", meta.len()))?;
    // The file may also grow while it is read: never read past the limit.
    file.take(limit + 1).read_to_end(&mut buf).map_err(|e| format!("cannot read {name}: {e}"))?;
    if buf.len() as u64 > limit {
        return Err(too_big(buf.len() as u64));
    }
    Ok(buf)
}

/// Write `bytes` to `path` atomically: into a temporary file in the same
/// directory, flushed to disk, then renamed over `path`. If anything fails
/// the temporary file is removed and an existing file at `path` is left as
/// it was.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    write_file_atomic_with(path, |f| f.write_all(bytes))
}

/// [`write_file_atomic`] with the contents streamed by `write` (through a
/// buffer), for results too large to hold as one string.
pub fn write_file_atomic_with(path: &Path, write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) -> Result<(), String> {
    use std::io::Write;
    let name = path.display();
    let fail = |e: &dyn std::fmt::Display| format!("cannot write {name}: {e}");
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(fail(&"it is a directory")),
        // A device or pipe (`/dev/stdout`, `/dev/null`, a FIFO) is written
        // as a stream: renaming over it would replace the device itself.
        Ok(m) if !m.is_file() => {
            return std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| {
                    let mut f = std::io::BufWriter::new(f);
                    write(&mut f)?;
                    f.flush()
                })
                .map_err(|e| fail(&e));
        }
        _ => {}
    }
    // Through a symbolic link, replace the file it points to, not the link.
    let resolved;
    let path = if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        resolved = std::fs::canonicalize(path).map_err(|e| fail(&e))?;
        resolved.as_path()
    } else {
        path
    };
    let file_name = path.file_name().ok_or_else(|| fail(&"the path does not name a file"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".arden-tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| -> std::io::Result<()> {
        let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        let mut f = std::io::BufWriter::new(f);
        write(&mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(&e)
    })
}

// ---------------------------------------------------------------- .npy

use crate::runtime::npy::{npy_name, shape_tuple};

/// Read a `.npy` file as it is (no expected type). A 0-d array gives a scalar.
pub fn read_npy(path: &Path) -> Result<Value, String> {
    let bytes = read_input_file(path)?;
    npy_from_bytes(&path.display().to_string(), &bytes)
}

/// Decode the bytes of a `.npy` file; `name` names it in messages. See
/// [`crate::runtime::npy`] for what is accepted.
pub fn npy_from_bytes(name: &str, bytes: &[u8]) -> Result<Value, String> {
    crate::runtime::npy::decode(name, bytes)
}

/// Check a value read from `.npy` against the expected leaf type.
fn check_npy_value(path: &str, v: &Value, ty: &Type) -> Result<(), String> {
    let elem = v.elem().expect("npy values are not tuples");
    let dims = v.shape();
    if elem != ty.elem {
        return Err(format!("{path} holds {} ({}) data, but {} is expected ({})", npy_name(elem), elem.name(), ty.elem.name(), npy_name(ty.elem)));
    }
    if dims.len() != ty.rank() {
        return Err(format!("{path} holds a {}-d array of shape {}, but {} is expected", dims.len(), shape_tuple(&dims), type_desc(ty)));
    }
    Ok(())
}

/// Write a scalar (as a 0-d array) or an array to a `.npy` file.
pub fn write_npy(path: &Path, v: &Value) -> Result<(), String> {
    write_file_atomic(path, &npy_bytes(v)?)
}

/// The `.npy` encoding of a scalar (as a 0-d array) or an array.
pub fn npy_bytes(v: &Value) -> Result<Vec<u8>, String> {
    let bytes = match v {
        Value::Tuple(_) => {
            return Err("--output .npy needs a single array result; this entry returns a tuple".to_string());
        }
        Value::Array(a) => crate::runtime::npy::encode(&a.shape, &a.data),
        scalar => {
            let mut d = ArrayData::with_capacity(scalar.elem().expect("a scalar"), 1);
            match (scalar, &mut d) {
                (Value::F64(x), ArrayData::F64(b)) => b.push(*x),
                (Value::F32(x), ArrayData::F32(b)) => b.push(*x),
                (Value::I64(x), ArrayData::I64(b)) => b.push(*x),
                (Value::I32(x), ArrayData::I32(b)) => b.push(*x),
                (Value::Bool(x), ArrayData::Bool(b)) => b.push(*x),
                _ => unreachable!("scalar and buffer of one type"),
            }
            crate::runtime::npy::encode(&[], &d)
        }
    };
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Size, VarId};

    fn leaf(elem: Scalar, rank: usize) -> Shape {
        Shape::Leaf(Type::array(elem, (0..rank).map(|k| Size::var(VarId(k as u32))).collect()))
    }
    fn j(text: &str) -> Json {
        parse_json_text(text).unwrap()
    }
    /// Convert through the JSON tree, and check the streaming reader of
    /// `parse_arg` gives the same value or the same message.
    fn conv(text: &str, shape: &Shape) -> Result<Value, String> {
        let tree = value_from_json(&j(text), shape);
        let streamed = parse_arg(text, shape);
        match (&tree, &streamed) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.to_json(), b.to_json(), "{text}");
                assert_eq!((a.shape(), a.elem()), (b.shape(), b.elem()), "{text}");
            }
            _ => assert_eq!(tree, streamed, "{text}"),
        }
        tree
    }
    fn arr(dims: Vec<usize>, data: ArrayData) -> Value {
        Value::array(dims, data)
    }

    struct TmpDir(std::path::PathBuf);
    impl TmpDir {
        fn new(tag: &str) -> TmpDir {
            let p = std::env::temp_dir().join(format!("arden-data-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            TmpDir(p)
        }
        fn file(&self, name: &str) -> std::path::PathBuf {
            self.0.join(name)
        }
    }
    impl Drop for TmpDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn scalars() {
        assert_eq!(conv("2.5", &leaf(Scalar::F64, 0)), Ok(Value::F64(2.5)));
        assert_eq!(conv("3", &leaf(Scalar::F64, 0)), Ok(Value::F64(3.0)));
        assert_eq!(conv("0.1", &leaf(Scalar::F32, 0)), Ok(Value::F32(0.1)));
        assert_eq!(conv("-7", &leaf(Scalar::I64, 0)), Ok(Value::I64(-7)));
        assert_eq!(conv("7", &leaf(Scalar::I32, 0)), Ok(Value::I32(7)));
        assert_eq!(conv("true", &leaf(Scalar::Bool, 0)), Ok(Value::Bool(true)));
        assert_eq!(conv("2.5", &leaf(Scalar::I64, 0)), Err("expected an integer, got 2.5".into()));
        assert_eq!(conv("2.0", &leaf(Scalar::I64, 0)), Err("expected an integer, got 2.0".into()));
        assert!(conv("3000000000", &leaf(Scalar::I32, 0)).unwrap_err().contains("does not fit in i32"));
        assert!(conv("18446744073709551615", &leaf(Scalar::I64, 0)).unwrap_err().contains("does not fit in i64"));
        assert!(conv("1", &leaf(Scalar::Bool, 0)).unwrap_err().contains("expected true or false"));
        assert!(conv("true", &leaf(Scalar::F64, 0)).unwrap_err().contains("expected a number (f64)"));
        assert_eq!(conv("[1]", &leaf(Scalar::F64, 0)), Err("expected a number (f64), got a 1-d array".into()));
        assert!(conv("null", &leaf(Scalar::I64, 0)).unwrap_err().contains("got null"));
    }

    #[test]
    fn non_finite_floats() {
        let s = leaf(Scalar::F64, 1);
        let v = conv("[NaN, Infinity, -Infinity, \"NaN\", \"-Infinity\", 1]", &s).unwrap();
        let Value::Array(a) = v else { panic!() };
        let ArrayData::F64(xs) = &a.data else { panic!() };
        assert!(xs[0].is_nan() && xs[3].is_nan());
        assert_eq!(&xs[1..3], &[f64::INFINITY, f64::NEG_INFINITY]);
        assert_eq!(xs[4], f64::NEG_INFINITY);
        // Tokens inside strings and inside longer words are left alone.
        assert_eq!(quote_non_finite(r#"["NaN x", "a\"NaN", NaNa]"#), r#"["NaN x", "a\"NaN", NaNa]"#);
        assert_eq!(quote_non_finite("[NaN,-Infinity]"), r#"["NaN","-Infinity"]"#);
        assert_eq!(quote_non_finite("[\"é\", Infinity]"), "[\"é\", \"Infinity\"]");
        // Not accepted for integers.
        assert_eq!(conv("NaN", &leaf(Scalar::I64, 0)), Err("expected an integer (i64), got NaN".into()));
        assert_eq!(conv("-Infinity", &leaf(Scalar::F64, 1)), Err("expected a 1-d array of f64, got -Infinity".into()));
        // Output of to_json parses back.
        let v = arr(vec![2, 2], ArrayData::F64(vec![1.0, f64::INFINITY, -0.0, 2.5].into()));
        assert_eq!(conv(&v.to_json(), &leaf(Scalar::F64, 2)).unwrap(), v);
    }

    #[test]
    fn arrays() {
        assert_eq!(conv("[[1, 2], [3, 4.5]]", &leaf(Scalar::F64, 2)), Ok(arr(vec![2, 2], ArrayData::F64(vec![1.0, 2.0, 3.0, 4.5].into()))));
        assert_eq!(conv("[1, 2, 3]", &leaf(Scalar::I32, 1)), Ok(arr(vec![3], ArrayData::I32(vec![1, 2, 3].into()))));
        assert_eq!(conv("[[true], [false]]", &leaf(Scalar::Bool, 2)), Ok(arr(vec![2, 1], ArrayData::Bool(vec![true, false].into()))));
        assert_eq!(conv("[[[1, 2]], [[3, 4]]]", &leaf(Scalar::I64, 3)), Ok(arr(vec![2, 1, 2], ArrayData::I64(vec![1, 2, 3, 4].into()))));
        assert_eq!(conv("[1.5, 2.25]", &leaf(Scalar::F32, 1)), Ok(arr(vec![2], ArrayData::F32(vec![1.5, 2.25].into()))));
    }

    #[test]
    fn array_errors() {
        let m = leaf(Scalar::F64, 2);
        assert_eq!(conv("[[1, 2], [3, 4], [5, 6, 7]]", &m), Err("ragged array: row 2 has length 3, expected 2".into()));
        assert_eq!(conv("[[1, 2], 3]", &m), Err("ragged array: row 1 is the number 3, expected an array of length 2".into()));
        assert_eq!(conv("3", &m), Err("expected a 2-d array of f64, got the number 3".into()));
        assert_eq!(conv("[1, 2]", &m), Err("expected a 2-d array of f64, got a 1-d array".into()));
        assert_eq!(conv("[[[1]]]", &m), Err("expected a 2-d array of f64, got a 3-d array".into()));
        assert_eq!(conv("[[1], [[2]]]", &m), Err("expected a number (f64), got a 1-d array (at [1][0])".into()));
        assert_eq!(conv("[[[1, 2], [3]]]", &leaf(Scalar::F64, 3)), Err("ragged array: row [0][1] has length 1, expected 2".into()));
        assert_eq!(conv("[1, 2.5]", &leaf(Scalar::I64, 1)), Err("expected an integer, got 2.5 (at [1])".into()));
        assert!(conv("{\"a\": 1}", &m).unwrap_err().contains("got an object"));
        assert!(conv("\"hello\"", &m).unwrap_err().contains("got the string \"hello\""));
    }

    #[test]
    fn empty_arrays() {
        assert_eq!(conv("[]", &leaf(Scalar::F64, 1)), Ok(arr(vec![0], ArrayData::F64(vec![].into()))));
        assert_eq!(conv("[[], []]", &leaf(Scalar::F64, 2)), Ok(arr(vec![2, 0], ArrayData::F64(vec![].into()))));
        assert_eq!(conv("[]", &leaf(Scalar::I64, 2)), Ok(arr(vec![0, 0], ArrayData::I64(vec![].into()))));
        // Constant inner sizes come from the type.
        let t = Shape::Leaf(Type::array(Scalar::F64, vec![Size::var(VarId(0)), Size::constant(3)]));
        assert_eq!(conv("[]", &t), Ok(arr(vec![0, 3], ArrayData::F64(vec![].into()))));
        assert_eq!(conv("[[], [1]]", &leaf(Scalar::F64, 2)), Err("ragged array: row 1 has length 1, expected 0".into()));
        assert_eq!(conv("[[[]], [[]]]", &leaf(Scalar::F64, 3)), Ok(arr(vec![2, 1, 0], ArrayData::F64(vec![].into()))));
        assert!(conv("[]", &leaf(Scalar::F64, 0)).unwrap_err().contains("got an empty array"));
    }

    #[test]
    fn tuples() {
        let t = Shape::Tuple(vec![leaf(Scalar::F64, 0), leaf(Scalar::I64, 1)]);
        assert_eq!(conv("[2.5, [1, 2]]", &t), Ok(Value::Tuple(vec![Value::F64(2.5), arr(vec![2], ArrayData::I64(vec![1, 2].into()))])));
        assert_eq!(conv("[2.5]", &t), Err("expected a tuple of (f64, []i64) as a JSON array of 2 elements, got an array of 1 element".into()));
        assert!(conv("2.5", &t).unwrap_err().contains("got the number 2.5"));
        assert_eq!(conv("[2.5, [1, 2.5]]", &t), Err("tuple component 1: expected an integer, got 2.5 (at [1])".into()));
        let nested = Shape::Tuple(vec![Shape::Tuple(vec![]), Shape::Tuple(vec![leaf(Scalar::Bool, 0)])]);
        assert_eq!(conv("[[], [false]]", &nested), Ok(Value::Tuple(vec![Value::Tuple(vec![]), Value::Tuple(vec![Value::Bool(false)])])));
    }

    #[test]
    fn parse_arg_text_and_json_files() {
        let s = leaf(Scalar::F64, 1);
        assert_eq!(parse_arg(" [1, 2] ", &s), Ok(arr(vec![2], ArrayData::F64(vec![1.0, 2.0].into()))));
        assert!(parse_arg("[1, 2", &s).unwrap_err().starts_with("cannot parse argument as JSON: "));
        assert!(parse_arg("abc", &s).unwrap_err().starts_with("cannot parse argument as JSON: "));
        let dir = TmpDir::new("json");
        let f = dir.file("a.json");
        std::fs::write(&f, "[[1, NaN]]\n").unwrap();
        let v = parse_arg(&format!("@{}", f.display()), &leaf(Scalar::F64, 2)).unwrap();
        assert_eq!(v.shape(), vec![1, 2]);
        std::fs::write(&f, "\u{feff}[[1, 2]]").unwrap();
        let v = parse_arg(&format!("@{}", f.display()), &leaf(Scalar::F64, 2)).unwrap();
        assert_eq!(v.shape(), vec![1, 2]);
        std::fs::write(&f, b"[1, \xff]").unwrap();
        let e = parse_arg(&format!("@{}", f.display()), &s).unwrap_err();
        assert!(e.ends_with("as JSON: invalid UTF-8 at byte 4"), "{e}");
        std::fs::write(&f, "[1,").unwrap();
        assert!(parse_arg(&format!("@{}", f.display()), &s).unwrap_err().contains("as JSON"));
        let missing = dir.file("missing.json");
        assert!(parse_arg(&format!("@{}", missing.display()), &s).unwrap_err().starts_with("cannot read "));
        assert!(parse_arg(&format!("@{}", dir.file("missing.npy").display()), &s).unwrap_err().starts_with("cannot read "));
        assert!(parse_arg("@", &s).is_err());
    }

    #[test]
    fn npy_round_trips() {
        let dir = TmpDir::new("npy");
        let cases: Vec<(Value, Shape)> = vec![
            (arr(vec![2, 3], ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0, f64::NAN, -0.0].into())), leaf(Scalar::F64, 2)),
            (arr(vec![3], ArrayData::F32(vec![0.1, 2.0, -3.5].into())), leaf(Scalar::F32, 1)),
            (arr(vec![2, 1, 2], ArrayData::I64(vec![1, -2, i64::MAX, i64::MIN].into())), leaf(Scalar::I64, 3)),
            (arr(vec![2], ArrayData::I32(vec![7, -7].into())), leaf(Scalar::I32, 1)),
            (arr(vec![3], ArrayData::Bool(vec![true, false, true].into())), leaf(Scalar::Bool, 1)),
            (arr(vec![0], ArrayData::F64(vec![].into())), leaf(Scalar::F64, 1)),
            (arr(vec![2, 0], ArrayData::I64(vec![].into())), leaf(Scalar::I64, 2)),
            (Value::F64(2.5), leaf(Scalar::F64, 0)),
            (Value::I32(-4), leaf(Scalar::I32, 0)),
            (Value::Bool(true), leaf(Scalar::Bool, 0)),
        ];
        for (k, (v, shape)) in cases.iter().enumerate() {
            let f = dir.file(&format!("v{k}.npy"));
            write_npy(&f, v).unwrap();
            let back = parse_arg(&format!("@{}", f.display()), shape).unwrap();
            // NaN != NaN: compare the JSON renderings.
            assert_eq!(back.to_json(), v.to_json(), "case {k}");
            assert_eq!(back.shape(), v.shape(), "case {k}");
            assert_eq!(back.elem(), v.elem(), "case {k}");
            assert_eq!(read_npy(&f).unwrap().to_json(), v.to_json());
        }
        // A 0-d array value (shape []) is written and read back as a scalar.
        let f = dir.file("zero_d.npy");
        write_npy(&f, &arr(vec![], ArrayData::F64(vec![4.0].into()))).unwrap();
        assert_eq!(read_npy(&f), Ok(Value::F64(4.0)));
    }

    #[test]
    fn npy_errors() {
        let dir = TmpDir::new("npyerr");
        let f = dir.file("m.npy");
        write_npy(&f, &arr(vec![2, 2], ArrayData::F32(vec![1.0, 2.0, 3.0, 4.0].into()))).unwrap();
        let spec = format!("@{}", f.display());
        let e = parse_arg(&spec, &leaf(Scalar::F64, 2)).unwrap_err();
        assert!(e.contains("float32") && e.contains("f64"), "{e}");
        let e = parse_arg(&spec, &leaf(Scalar::F32, 1)).unwrap_err();
        assert!(e.contains("2-d array of shape (2, 2)") && e.contains("a 1-d array of f32"), "{e}");
        let e = parse_arg(&spec, &Shape::Tuple(vec![leaf(Scalar::F32, 2)])).unwrap_err();
        assert!(e.contains("tuple"), "{e}");
        // Unsupported dtype: a hand-written uint8 file.
        let u8file = dir.file("u8.npy");
        let mut buf = b"\x93NUMPY\x01\x00".to_vec();
        let hdr = "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }\n";
        buf.extend_from_slice(&(hdr.len() as u16).to_le_bytes());
        buf.extend_from_slice(hdr.as_bytes());
        buf.extend_from_slice(&[1, 2]);
        std::fs::write(&u8file, buf).unwrap();
        let e = parse_arg(&format!("@{}", u8file.display()), &leaf(Scalar::I64, 1)).unwrap_err();
        assert!(e.contains("unsupported dtype"), "{e}");
        // Not an npy file at all.
        let junk = dir.file("junk.npy");
        std::fs::write(&junk, "hello").unwrap();
        assert!(read_npy(&junk).unwrap_err().contains("not a valid .npy file"));
        // Tuples cannot be written.
        let e = write_npy(&dir.file("t.npy"), &Value::Tuple(vec![Value::F64(1.0)])).unwrap_err();
        assert_eq!(e, "--output .npy needs a single array result; this entry returns a tuple");
        // Unwritable path.
        let e = write_npy(&dir.file("no/such/dir/x.npy"), &Value::F64(1.0)).unwrap_err();
        assert!(e.starts_with("cannot write "), "{e}");
    }

    #[test]
    fn f32_overflow_is_an_error() {
        let e = conv("1e39", &leaf(Scalar::F32, 0)).unwrap_err();
        assert!(e.contains("out of range for f32"), "{e}");
        let e = conv("[1, -1e39]", &leaf(Scalar::F32, 1)).unwrap_err();
        assert!(e.contains("out of range for f32") && e.contains("(at [1])"), "{e}");
        // The largest finite f32 and the explicit non-finite tokens are fine.
        assert_eq!(conv("3.4028235e38", &leaf(Scalar::F32, 0)), Ok(Value::F32(f32::MAX)));
        assert_eq!(conv("-Infinity", &leaf(Scalar::F32, 0)), Ok(Value::F32(f32::NEG_INFINITY)));
        // 1e39 is an ordinary f64.
        assert_eq!(conv("1e39", &leaf(Scalar::F64, 0)), Ok(Value::F64(1e39)));
    }

    #[test]
    fn minus_zero() {
        assert_eq!(conv("-0", &leaf(Scalar::I64, 0)), Ok(Value::I64(0)));
        assert_eq!(conv("-0", &leaf(Scalar::I32, 0)), Ok(Value::I32(0)));
        assert_eq!(conv("[1, -0, -0]", &leaf(Scalar::I64, 1)), Ok(arr(vec![3], ArrayData::I64(vec![1, 0, 0].into()))));
        // For floats it stays negative zero.
        let Value::F64(x) = conv("-0", &leaf(Scalar::F64, 0)).unwrap() else { panic!() };
        assert!(x == 0.0 && x.is_sign_negative());
        // Not rewritten inside strings or longer numbers.
        assert_eq!(quote_non_finite("[-0.5, -0e1, 1e-0, \"-0\"]"), "[-0.5, -0e1, 1e-0, \"-0\"]");
        assert_eq!(conv("-0.0", &leaf(Scalar::I64, 0)), Err("expected an integer, got -0.0".into()));
        assert!(conv("-0", &leaf(Scalar::Bool, 0)).unwrap_err().contains("got -0"));
    }

    #[test]
    fn integers_out_of_range() {
        for text in ["-9223372036854775809", "1e19", "-1e30"] {
            let e = conv(text, &leaf(Scalar::I64, 0)).unwrap_err();
            assert!(e.contains("does not fit in i64"), "{text}: {e}");
        }
        assert_eq!(conv("-9223372036854775808", &leaf(Scalar::I64, 0)), Ok(Value::I64(i64::MIN)));
        assert!(conv("[2147483648]", &leaf(Scalar::I32, 1)).unwrap_err().contains("does not fit in i32"));
        assert_eq!(conv("-2147483648", &leaf(Scalar::I32, 0)), Ok(Value::I32(i32::MIN)));
        assert!(conv("1.5e3", &leaf(Scalar::I32, 0)).unwrap_err().contains("expected an integer"));
        assert!(conv("Infinity", &leaf(Scalar::I32, 0)).unwrap_err().contains("expected an integer (i32)"));
    }

    fn npy_file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut buf = b"\x93NUMPY\x01\x00".to_vec();
        buf.extend_from_slice(&(header.len() as u16).to_le_bytes());
        buf.extend_from_slice(header.as_bytes());
        buf.extend_from_slice(data);
        buf
    }

    #[test]
    fn npy_headers_as_numpy_writes_them() {
        let data: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let want = arr(vec![2, 3], ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0].into()));
        for hdr in [
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }            \n",
            "{\"shape\": (2L, 3L), \"descr\": \"<f8\", \"fortran_order\": False}\n",
            "{'fortran_order':False,'shape':(2,3,),'descr':'<f8'}",
        ] {
            assert_eq!(npy_from_bytes("t.npy", &npy_file(hdr, &data)), Ok(want.clone()), "{hdr}");
        }
        // Big-endian data.
        let be: Vec<u8> = [1i32, -2].iter().flat_map(|x| x.to_be_bytes()).collect();
        assert_eq!(
            npy_from_bytes("t.npy", &npy_file("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }\n", &be)),
            Ok(arr(vec![2], ArrayData::I32(vec![1, -2].into())))
        );
        // Fortran order is harmless for 1-d arrays and scalars.
        assert_eq!(npy_from_bytes("t.npy", &npy_file("{'descr': '|b1', 'fortran_order': True, 'shape': (), }\n", &[1])), Ok(Value::Bool(true)));
        // Fortran order: column-major data, reordered.
        let col: Vec<u8> = [1i64, 4, 2, 5, 3, 6].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(
            npy_from_bytes("t.npy", &npy_file("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3), }\n", &col)),
            Ok(arr(vec![2, 3], ArrayData::I64(vec![1, 2, 3, 4, 5, 6].into())))
        );
        // 2x1x3 and 2x3x2: element [i][j][k] at i + 2j + 2*dj*k in the file.
        for (d1, d2) in [(1usize, 3usize), (3, 2)] {
            let n = 2 * d1 * d2;
            let mut file = vec![0i32; n];
            let mut want = vec![];
            for i in 0..2 {
                for j in 0..d1 {
                    for k in 0..d2 {
                        let v = (100 * i + 10 * j + k) as i32;
                        file[i + 2 * j + 2 * d1 * k] = v;
                        want.push(v);
                    }
                }
            }
            let bytes: Vec<u8> = file.iter().flat_map(|x| x.to_le_bytes()).collect();
            let hdr = format!("{{'descr': '<i4', 'fortran_order': True, 'shape': (2, {d1}, {d2}), }}\n");
            assert_eq!(npy_from_bytes("t.npy", &npy_file(&hdr, &bytes)), Ok(arr(vec![2, d1, d2], ArrayData::I32(want.into()))));
        }
        // Version 2.0: a 4-byte header length.
        let hdr = "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }\n";
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend_from_slice(&(hdr.len() as u32).to_le_bytes());
        v2.extend_from_slice(hdr.as_bytes());
        v2.extend_from_slice(&7i64.to_le_bytes());
        assert_eq!(npy_from_bytes("t.npy", &v2), Ok(arr(vec![1], ArrayData::I64(vec![7].into()))));
        // What we write numpy can read: the data is 64-byte aligned.
        let bytes = npy_bytes(&want).unwrap();
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert!(bytes[..10 + hlen].ends_with(b"\n"));
    }

    #[test]
    fn npy_hostile_headers() {
        let err = |hdr: &str, data: &[u8]| npy_from_bytes("h.npy", &npy_file(hdr, data)).unwrap_err();
        let cases: Vec<(String, &[u8], &str)> = vec![
            // Deeply nested brackets: refused at the first `[`, in linear time.
            (format!("{{'descr': {}", "[".repeat(60_000)), &[], "structured dtypes"),
            (format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({}", "(".repeat(1000)), &[], "non-negative integers"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}".into(), &[0; 16], "unexpected key 'extra'"),
            ("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}".into(), &[0; 16], "appears twice"),
            ("{'descr': '<f8', 'fortran_order': False}".into(), &[], "no 'shape' key"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}".into(), &[], "non-negative integers, found `-`"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (3)}".into(), &[0; 24], "(n,)"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,)}".into(), &[], "too large"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}".into(), &[], "too many elements"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000000000,)}".into(), &[], "needs 8000000000000000000 bytes, the file holds 0"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (3000000000000000000,)}".into(), &[], "of float64 is too large"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (3,)}".into(), &[0; 23], "data section is too short"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (3,)}".into(), &[0; 25], "1 bytes of trailing data"),
            ("{'descr': '|b1', 'fortran_order': False, 'shape': (2,)}".into(), &[1, 7], "not 0 or 1"),
            ("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2,)}".into(), &[0; 16], "True or False"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)} x".into(), &[0; 8], "after the dict"),
            ("{'descr': '<f8\\', 'fortran_order': False, 'shape': (1,)}".into(), &[0; 8], "escapes"),
            (format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({})}}", "1, ".repeat(65)), &[0; 8], "more than 64 axes"),
        ];
        for (hdr, data, needle) in cases {
            let start = std::time::Instant::now();
            let e = err(&hdr, data);
            assert!(start.elapsed().as_secs() < 1, "slow on {hdr:.60}");
            assert!(e.contains(needle) && e.starts_with("h.npy: "), "{hdr:.80}: {e}");
        }
        // Preamble errors.
        let pre = |b: &[u8]| npy_from_bytes("h.npy", b).unwrap_err();
        assert!(pre(b"").contains("magic"));
        assert!(pre(b"\x93NUMPY").contains("version"));
        assert!(pre(b"\x93NUMPY\x04\x00").contains("unsupported format version 4.0"));
        assert!(pre(b"\x93NUMPY\x01\x00\x10").contains("header length"));
        assert!(pre(b"\x93NUMPY\x01\x00\x10\x00{").contains("file ends after 1"));
        assert!(pre(b"\x93NUMPY\x02\x00\xff\xff\xff\x7f").contains("at most 65536"));
        assert!(pre(b"\x93NUMPY\x01\x00\x02\x00\xff\xfe").contains("not ASCII"));
    }

    #[test]
    fn input_files_must_be_regular_and_bounded() {
        let s = leaf(Scalar::F64, 1);
        for dev in ["/dev/zero", "/dev/null"] {
            for ext in ["", ".npy"] {
                // The extension decides the reader; a symlink keeps it.
                let dir = TmpDir::new(&format!("dev{ext}{}", dev.len()));
                let link = dir.file(&format!("link{ext}"));
                std::os::unix::fs::symlink(dev, &link).unwrap();
                let e = parse_arg(&format!("@{}", link.display()), &s).unwrap_err();
                assert!(e.contains("not a regular file") && e.contains("link"), "{e}");
            }
        }
        let e = parse_arg("@/dev/zero", &s).unwrap_err();
        assert_eq!(e, "cannot read /dev/zero: it is not a regular file (a device, pipe or socket); pass a regular file");
        let e = parse_arg(&format!("@{}", std::env::temp_dir().display()), &s).unwrap_err();
        assert!(e.contains("it is a directory"), "{e}");
    }

    #[test]
    fn atomic_write_keeps_the_old_file_on_failure() {
        let dir = TmpDir::new("atomic");
        let f = dir.file("out.json");
        write_file_atomic(&f, b"old").unwrap();
        write_file_atomic(&f, b"new").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        // A directory in the way: error naming the path, nothing left behind.
        let d = dir.file("sub");
        std::fs::create_dir(&d).unwrap();
        let e = write_file_atomic(&d, b"x").unwrap_err();
        assert!(e.contains("sub") && e.contains("directory"), "{e}");
        // A parent that is a file.
        let e = write_file_atomic(&f.join("x.npy"), b"x").unwrap_err();
        assert!(e.starts_with("cannot write ") && e.contains("out.json"), "{e}");
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // Devices are written as streams, never replaced.
        write_file_atomic(Path::new("/dev/null"), b"x").unwrap();
        assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
        // A symbolic link keeps pointing at the (new) file.
        let link = dir.file("link.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        write_file_atomic(&link, b"via link").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&f).unwrap(), b"via link");
    }

    /// serde_json's default float parser can be off by one unit in the last
    /// place (`5e39` read as 4.9999999999999995e39, found by cargo-fuzz);
    /// the `float_roundtrip` feature makes it exact.
    #[test]
    fn floats_are_read_exactly() {
        for text in
            ["5e39", "0.1", "2.2250738585072014e-308", "1.7976931348623157e308", "5e-324", "9007199254740993", "4.9999999999999995e39", "123456789.12345679"]
        {
            let want: f64 = text.parse().unwrap();
            assert_eq!(conv(text, &leaf(Scalar::F64, 0)), Ok(Value::F64(want)), "{text}");
            let Value::Array(a) = conv(&format!("[{text}]"), &leaf(Scalar::F64, 1)).unwrap() else { panic!() };
            assert_eq!(a.data, ArrayData::F64(vec![want].into()), "{text}");
        }
    }
}
