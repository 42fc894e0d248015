//! JSON and NumPy `.npy` data in and out (LANGUAGE.md §10).
//!
//! - [`value_from_json`] converts a parsed JSON value to a [`Value`], guided
//!   by the expected surface [`Shape`] of a parameter: the element type picks
//!   the scalar kind, the rank says how deeply arrays nest, tuples are JSON
//!   arrays with one element per component.
//! - [`parse_arg`] reads one command-line argument: JSON text, `@file.json`
//!   or `@file.npy`.
//! - [`read_npy`] / [`write_npy`] read and write `.npy` files (dtypes
//!   float64, float32, int64, int32 and bool; C order; 0-d files are scalars).
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
                    vals.push(
                        value_from_json(item, comp)
                            .map_err(|e| format!("tuple component {k}: {e}"))?,
                    );
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
            return Err(
                "`@` must be followed by a file name (`@data.json` or `@data.npy`)".to_string(),
            );
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
            let text =
                std::fs::read_to_string(p).map_err(|e| format!("cannot read {path}: {e}"))?;
            let json =
                parse_json_text(&text).map_err(|e| format!("cannot parse {path} as JSON: {e}"))?;
            value_from_json(&json, shape)
        }
    } else {
        let json =
            parse_json_text(spec).map_err(|e| format!("cannot parse argument as JSON: {e}"))?;
        value_from_json(&json, shape)
    }
}

/// Parse JSON text, also accepting the bare tokens `NaN`, `Infinity` and
/// `-Infinity` outside of strings (they become the strings of those names,
/// which [`value_from_json`] accepts as floats).
pub fn parse_json_text(text: &str) -> Result<Json, String> {
    serde_json::from_str(&quote_non_finite(text)).map_err(|e| e.to_string())
}

fn quote_non_finite(text: &str) -> String {
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
            for tok in ["-Infinity", "Infinity", "NaN"] {
                if text[i..].starts_with(tok)
                    && bytes.get(i + tok.len()).is_none_or(|&c| !word_char(c))
                {
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

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// "a 2-d array of f64", "an f64 number", "a bool (true or false)".
fn type_desc(ty: &Type) -> String {
    if ty.rank() == 0 {
        scalar_desc(ty.elem).to_string()
    } else {
        format!("a {}-d array of {}", ty.rank(), ty.elem.name())
    }
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

fn shape_desc(shape: &Shape) -> String {
    match shape {
        Shape::Leaf(ty) => {
            let dims: String = (0..ty.rank()).map(|_| "[]").collect();
            format!("{dims}{}", ty.elem.name())
        }
        Shape::Tuple(ts) => format!(
            "({})",
            ts.iter().map(shape_desc).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// What a JSON value is, for messages: "a number", "a 2-d array", ...
fn describe_json(j: &Json) -> String {
    match j {
        Json::Null => "null".to_string(),
        Json::Bool(b) => format!("`{b}`"),
        Json::Number(n) => format!("the number {n}"),
        Json::String(s) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => s.clone(),
        Json::String(s) => {
            let short: String = s.chars().take(40).collect();
            format!(
                "the string {:?}",
                if short.len() < s.len() {
                    format!("{short}…")
                } else {
                    short
                }
            )
        }
        Json::Object(_) => "an object".to_string(),
        Json::Array(xs) if xs.is_empty() => "an empty array".to_string(),
        Json::Array(_) => format!("a {}-d array", json_depth(j)),
    }
}

/// Nesting depth of arrays, following first elements.
fn json_depth(j: &Json) -> usize {
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
        return Err(format!(
            "expected {}, got {}",
            type_desc(ty),
            describe_json(json)
        ));
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
        return Err(format!(
            "expected {}, got a {}-d array",
            type_desc(ty),
            rank + json_depth(cur)
        ));
    }
    let total = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or("array too large")?;
    let mut data = ArrayData::with_capacity(ty.elem, total.min(1 << 24));
    let mut path = Vec::with_capacity(rank);
    fill(json, 0, &dims, ty.elem, &mut path, &mut data)?;
    Ok(Value::array(dims, data))
}

fn path_str(path: &[usize]) -> String {
    path.iter().map(|i| format!("[{i}]")).collect()
}

/// "row 2" at the top level, "row [1][2]" deeper.
fn row_name(path: &[usize]) -> String {
    match path {
        [i] => format!("row {i}"),
        _ => format!("row {}", path_str(path)),
    }
}

fn fill(
    j: &Json,
    d: usize,
    dims: &[usize],
    elem: Scalar,
    path: &mut Vec<usize>,
    data: &mut ArrayData,
) -> Result<(), String> {
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
        Json::Array(xs) => Err(format!(
            "ragged array: {} has length {}, expected {}",
            row_name(path),
            xs.len(),
            dims[d]
        )),
        other => Err(format!(
            "ragged array: {} is {}, expected an array of length {}",
            row_name(path),
            describe_json(other),
            dims[d]
        )),
    }
}

fn json_float(j: &Json) -> Option<f64> {
    match j {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" | "nan" => Some(f64::NAN),
            "Infinity" | "inf" | "+Infinity" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn push_scalar(j: &Json, elem: Scalar, data: &mut ArrayData) -> Result<(), String> {
    let bad = || format!("expected {}, got {}", scalar_desc(elem), describe_json(j));
    match (elem, data) {
        (Scalar::F64, ArrayData::F64(v)) => v.push(json_float(j).ok_or_else(bad)?),
        (Scalar::F32, ArrayData::F32(v)) => v.push(json_float(j).ok_or_else(bad)? as f32),
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
            } else {
                Err(format!("expected an integer, got {n}"))
            }
        }
        _ => Err(format!(
            "expected {}, got {}",
            scalar_desc(elem),
            describe_json(j)
        )),
    }
}

// ---------------------------------------------------------------- .npy

fn npy_name(s: Scalar) -> &'static str {
    match s {
        Scalar::F64 => "float64",
        Scalar::F32 => "float32",
        Scalar::I64 => "int64",
        Scalar::I32 => "int32",
        Scalar::Bool => "bool",
    }
}

fn shape_tuple(dims: &[usize]) -> String {
    match dims {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Read a `.npy` file as it is (no expected type). A 0-d array gives a scalar.
pub fn read_npy(path: &Path) -> Result<Value, String> {
    let name = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let npy = npyz::NpyFile::new(&bytes[..])
        .map_err(|e| format!("{name}: not a valid .npy file: {e}"))?;
    if npy.order() == npyz::Order::Fortran && npy.shape().len() > 1 {
        return Err(format!(
            "{name}: Fortran-order .npy files are not supported; save a C-order array (numpy.ascontiguousarray)"
        ));
    }
    let dtype = npy.dtype();
    let elem = match &dtype {
        npyz::DType::Plain(ts) => match (ts.type_char(), ts.size_field()) {
            (npyz::TypeChar::Float, 8) => Some(Scalar::F64),
            (npyz::TypeChar::Float, 4) => Some(Scalar::F32),
            (npyz::TypeChar::Int, 8) => Some(Scalar::I64),
            (npyz::TypeChar::Int, 4) => Some(Scalar::I32),
            (npyz::TypeChar::Bool, 1) => Some(Scalar::Bool),
            _ => None,
        },
        _ => None,
    };
    let Some(elem) = elem else {
        return Err(format!(
            "{name}: unsupported dtype {} (supported: float64, float32, int64, int32, bool)",
            dtype.descr()
        ));
    };
    let dims: Vec<usize> = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("{name}: array too large")))
        .collect::<Result<_, _>>()?;
    let read_err = |e: std::io::Error| format!("{name}: cannot read the data: {e}");
    let data = match elem {
        Scalar::F64 => ArrayData::F64(npy.into_vec::<f64>().map_err(read_err)?),
        Scalar::F32 => ArrayData::F32(npy.into_vec::<f32>().map_err(read_err)?),
        Scalar::I64 => ArrayData::I64(npy.into_vec::<i64>().map_err(read_err)?),
        Scalar::I32 => ArrayData::I32(npy.into_vec::<i32>().map_err(read_err)?),
        Scalar::Bool => ArrayData::Bool(npy.into_vec::<bool>().map_err(read_err)?),
    };
    let want: Option<usize> = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if want != Some(data.len()) {
        return Err(format!(
            "{name}: the file holds {} elements, but its shape {} needs {}",
            data.len(),
            shape_tuple(&dims),
            want.map_or("more".to_string(), |w| w.to_string())
        ));
    }
    if dims.is_empty() {
        return Ok(data.get(0));
    }
    Ok(Value::array(dims, data))
}

/// Check a value read from `.npy` against the expected leaf type.
fn check_npy_value(path: &str, v: &Value, ty: &Type) -> Result<(), String> {
    let elem = v.elem().expect("npy values are not tuples");
    let dims = v.shape();
    if elem != ty.elem {
        return Err(format!(
            "{path} holds {} ({}) data, but {} is expected ({})",
            npy_name(elem),
            elem.name(),
            ty.elem.name(),
            npy_name(ty.elem)
        ));
    }
    if dims.len() != ty.rank() {
        return Err(format!(
            "{path} holds a {}-d array of shape {}, but {} is expected",
            dims.len(),
            shape_tuple(&dims),
            type_desc(ty)
        ));
    }
    Ok(())
}

/// Write a scalar (as a 0-d array) or an array to a `.npy` file.
pub fn write_npy(path: &Path, v: &Value) -> Result<(), String> {
    use npyz::WriterBuilder;
    let (dims, data): (Vec<u64>, ArrayData) = match v {
        Value::Tuple(_) => {
            return Err(
                "--output .npy needs a single array result; this entry returns a tuple".to_string(),
            );
        }
        Value::Array(a) => (a.shape.iter().map(|&d| d as u64).collect(), a.data.clone()),
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
            (vec![], d)
        }
    };
    fn encode<T: npyz::AutoSerialize + Copy>(dims: &[u64], xs: &[T]) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![];
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(dims)
            .writer(&mut buf)
            .begin_nd()?;
        w.extend(xs.iter().copied())?;
        w.finish()?;
        Ok(buf)
    }
    let bytes = match &data {
        ArrayData::F64(xs) => encode(&dims, xs),
        ArrayData::F32(xs) => encode(&dims, xs),
        ArrayData::I64(xs) => encode(&dims, xs),
        ArrayData::I32(xs) => encode(&dims, xs),
        ArrayData::Bool(xs) => encode(&dims, xs),
    }
    .map_err(|e| format!("cannot encode .npy data: {e}"))?;
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Size, VarId};

    fn leaf(elem: Scalar, rank: usize) -> Shape {
        Shape::Leaf(Type::array(
            elem,
            (0..rank).map(|k| Size::var(VarId(k as u32))).collect(),
        ))
    }
    fn j(text: &str) -> Json {
        parse_json_text(text).unwrap()
    }
    fn conv(text: &str, shape: &Shape) -> Result<Value, String> {
        value_from_json(&j(text), shape)
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
        assert_eq!(
            conv("2.5", &leaf(Scalar::I64, 0)),
            Err("expected an integer, got 2.5".into())
        );
        assert_eq!(
            conv("2.0", &leaf(Scalar::I64, 0)),
            Err("expected an integer, got 2.0".into())
        );
        assert!(
            conv("3000000000", &leaf(Scalar::I32, 0))
                .unwrap_err()
                .contains("does not fit in i32")
        );
        assert!(
            conv("18446744073709551615", &leaf(Scalar::I64, 0))
                .unwrap_err()
                .contains("does not fit in i64")
        );
        assert!(
            conv("1", &leaf(Scalar::Bool, 0))
                .unwrap_err()
                .contains("expected true or false")
        );
        assert!(
            conv("true", &leaf(Scalar::F64, 0))
                .unwrap_err()
                .contains("expected a number (f64)")
        );
        assert_eq!(
            conv("[1]", &leaf(Scalar::F64, 0)),
            Err("expected a number (f64), got a 1-d array".into())
        );
        assert!(
            conv("null", &leaf(Scalar::I64, 0))
                .unwrap_err()
                .contains("got null")
        );
    }

    #[test]
    fn non_finite_floats() {
        let s = leaf(Scalar::F64, 1);
        let v = conv("[NaN, Infinity, -Infinity, \"NaN\", \"-Infinity\", 1]", &s).unwrap();
        let Value::Array(a) = v else { panic!() };
        let ArrayData::F64(xs) = &a.data else {
            panic!()
        };
        assert!(xs[0].is_nan() && xs[3].is_nan());
        assert_eq!(&xs[1..3], &[f64::INFINITY, f64::NEG_INFINITY]);
        assert_eq!(xs[4], f64::NEG_INFINITY);
        // Tokens inside strings and inside longer words are left alone.
        assert_eq!(
            quote_non_finite(r#"["NaN x", "a\"NaN", NaNa]"#),
            r#"["NaN x", "a\"NaN", NaNa]"#
        );
        assert_eq!(
            quote_non_finite("[NaN,-Infinity]"),
            r#"["NaN","-Infinity"]"#
        );
        assert_eq!(
            quote_non_finite("[\"é\", Infinity]"),
            "[\"é\", \"Infinity\"]"
        );
        // Not accepted for integers.
        assert_eq!(
            conv("NaN", &leaf(Scalar::I64, 0)),
            Err("expected an integer (i64), got NaN".into())
        );
        assert_eq!(
            conv("-Infinity", &leaf(Scalar::F64, 1)),
            Err("expected a 1-d array of f64, got -Infinity".into())
        );
        // Output of to_json parses back.
        let v = arr(
            vec![2, 2],
            ArrayData::F64(vec![1.0, f64::INFINITY, -0.0, 2.5]),
        );
        assert_eq!(conv(&v.to_json(), &leaf(Scalar::F64, 2)).unwrap(), v);
    }

    #[test]
    fn arrays() {
        assert_eq!(
            conv("[[1, 2], [3, 4.5]]", &leaf(Scalar::F64, 2)),
            Ok(arr(vec![2, 2], ArrayData::F64(vec![1.0, 2.0, 3.0, 4.5])))
        );
        assert_eq!(
            conv("[1, 2, 3]", &leaf(Scalar::I32, 1)),
            Ok(arr(vec![3], ArrayData::I32(vec![1, 2, 3])))
        );
        assert_eq!(
            conv("[[true], [false]]", &leaf(Scalar::Bool, 2)),
            Ok(arr(vec![2, 1], ArrayData::Bool(vec![true, false])))
        );
        assert_eq!(
            conv("[[[1, 2]], [[3, 4]]]", &leaf(Scalar::I64, 3)),
            Ok(arr(vec![2, 1, 2], ArrayData::I64(vec![1, 2, 3, 4])))
        );
        assert_eq!(
            conv("[1.5, 2.25]", &leaf(Scalar::F32, 1)),
            Ok(arr(vec![2], ArrayData::F32(vec![1.5, 2.25])))
        );
    }

    #[test]
    fn array_errors() {
        let m = leaf(Scalar::F64, 2);
        assert_eq!(
            conv("[[1, 2], [3, 4], [5, 6, 7]]", &m),
            Err("ragged array: row 2 has length 3, expected 2".into())
        );
        assert_eq!(
            conv("[[1, 2], 3]", &m),
            Err("ragged array: row 1 is the number 3, expected an array of length 2".into())
        );
        assert_eq!(
            conv("3", &m),
            Err("expected a 2-d array of f64, got the number 3".into())
        );
        assert_eq!(
            conv("[1, 2]", &m),
            Err("expected a 2-d array of f64, got a 1-d array".into())
        );
        assert_eq!(
            conv("[[[1]]]", &m),
            Err("expected a 2-d array of f64, got a 3-d array".into())
        );
        assert_eq!(
            conv("[[1], [[2]]]", &m),
            Err("expected a number (f64), got a 1-d array (at [1][0])".into())
        );
        assert_eq!(
            conv("[[[1, 2], [3]]]", &leaf(Scalar::F64, 3)),
            Err("ragged array: row [0][1] has length 1, expected 2".into())
        );
        assert_eq!(
            conv("[1, 2.5]", &leaf(Scalar::I64, 1)),
            Err("expected an integer, got 2.5 (at [1])".into())
        );
        assert!(
            conv("{\"a\": 1}", &m)
                .unwrap_err()
                .contains("got an object")
        );
        assert!(
            conv("\"hello\"", &m)
                .unwrap_err()
                .contains("got the string \"hello\"")
        );
    }

    #[test]
    fn empty_arrays() {
        assert_eq!(
            conv("[]", &leaf(Scalar::F64, 1)),
            Ok(arr(vec![0], ArrayData::F64(vec![])))
        );
        assert_eq!(
            conv("[[], []]", &leaf(Scalar::F64, 2)),
            Ok(arr(vec![2, 0], ArrayData::F64(vec![])))
        );
        assert_eq!(
            conv("[]", &leaf(Scalar::I64, 2)),
            Ok(arr(vec![0, 0], ArrayData::I64(vec![])))
        );
        // Constant inner sizes come from the type.
        let t = Shape::Leaf(Type::array(
            Scalar::F64,
            vec![Size::var(VarId(0)), Size::constant(3)],
        ));
        assert_eq!(conv("[]", &t), Ok(arr(vec![0, 3], ArrayData::F64(vec![]))));
        assert_eq!(
            conv("[[], [1]]", &leaf(Scalar::F64, 2)),
            Err("ragged array: row 1 has length 1, expected 0".into())
        );
        assert_eq!(
            conv("[[[]], [[]]]", &leaf(Scalar::F64, 3)),
            Ok(arr(vec![2, 1, 0], ArrayData::F64(vec![])))
        );
        assert!(
            conv("[]", &leaf(Scalar::F64, 0))
                .unwrap_err()
                .contains("got an empty array")
        );
    }

    #[test]
    fn tuples() {
        let t = Shape::Tuple(vec![leaf(Scalar::F64, 0), leaf(Scalar::I64, 1)]);
        assert_eq!(
            conv("[2.5, [1, 2]]", &t),
            Ok(Value::Tuple(vec![
                Value::F64(2.5),
                arr(vec![2], ArrayData::I64(vec![1, 2]))
            ]))
        );
        assert_eq!(
            conv("[2.5]", &t),
            Err("expected a tuple of (f64, []i64) as a JSON array of 2 elements, got an array of 1 element".into())
        );
        assert!(conv("2.5", &t).unwrap_err().contains("got the number 2.5"));
        assert_eq!(
            conv("[2.5, [1, 2.5]]", &t),
            Err("tuple component 1: expected an integer, got 2.5 (at [1])".into())
        );
        let nested = Shape::Tuple(vec![
            Shape::Tuple(vec![]),
            Shape::Tuple(vec![leaf(Scalar::Bool, 0)]),
        ]);
        assert_eq!(
            conv("[[], [false]]", &nested),
            Ok(Value::Tuple(vec![
                Value::Tuple(vec![]),
                Value::Tuple(vec![Value::Bool(false)])
            ]))
        );
    }

    #[test]
    fn parse_arg_text_and_json_files() {
        let s = leaf(Scalar::F64, 1);
        assert_eq!(
            parse_arg(" [1, 2] ", &s),
            Ok(arr(vec![2], ArrayData::F64(vec![1.0, 2.0])))
        );
        assert!(
            parse_arg("[1, 2", &s)
                .unwrap_err()
                .starts_with("cannot parse argument as JSON: ")
        );
        assert!(
            parse_arg("abc", &s)
                .unwrap_err()
                .starts_with("cannot parse argument as JSON: ")
        );
        let dir = TmpDir::new("json");
        let f = dir.file("a.json");
        std::fs::write(&f, "[[1, NaN]]\n").unwrap();
        let v = parse_arg(&format!("@{}", f.display()), &leaf(Scalar::F64, 2)).unwrap();
        assert_eq!(v.shape(), vec![1, 2]);
        std::fs::write(&f, "[1,").unwrap();
        assert!(
            parse_arg(&format!("@{}", f.display()), &s)
                .unwrap_err()
                .contains("as JSON")
        );
        let missing = dir.file("missing.json");
        assert!(
            parse_arg(&format!("@{}", missing.display()), &s)
                .unwrap_err()
                .starts_with("cannot read ")
        );
        assert!(
            parse_arg(&format!("@{}", dir.file("missing.npy").display()), &s)
                .unwrap_err()
                .starts_with("cannot read ")
        );
        assert!(parse_arg("@", &s).is_err());
    }

    #[test]
    fn npy_round_trips() {
        let dir = TmpDir::new("npy");
        let cases: Vec<(Value, Shape)> = vec![
            (
                arr(
                    vec![2, 3],
                    ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0, f64::NAN, -0.0]),
                ),
                leaf(Scalar::F64, 2),
            ),
            (
                arr(vec![3], ArrayData::F32(vec![0.1, 2.0, -3.5])),
                leaf(Scalar::F32, 1),
            ),
            (
                arr(
                    vec![2, 1, 2],
                    ArrayData::I64(vec![1, -2, i64::MAX, i64::MIN]),
                ),
                leaf(Scalar::I64, 3),
            ),
            (
                arr(vec![2], ArrayData::I32(vec![7, -7])),
                leaf(Scalar::I32, 1),
            ),
            (
                arr(vec![3], ArrayData::Bool(vec![true, false, true])),
                leaf(Scalar::Bool, 1),
            ),
            (arr(vec![0], ArrayData::F64(vec![])), leaf(Scalar::F64, 1)),
            (
                arr(vec![2, 0], ArrayData::I64(vec![])),
                leaf(Scalar::I64, 2),
            ),
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
        write_npy(&f, &arr(vec![], ArrayData::F64(vec![4.0]))).unwrap();
        assert_eq!(read_npy(&f), Ok(Value::F64(4.0)));
    }

    #[test]
    fn npy_errors() {
        let dir = TmpDir::new("npyerr");
        let f = dir.file("m.npy");
        write_npy(
            &f,
            &arr(vec![2, 2], ArrayData::F32(vec![1.0, 2.0, 3.0, 4.0])),
        )
        .unwrap();
        let spec = format!("@{}", f.display());
        let e = parse_arg(&spec, &leaf(Scalar::F64, 2)).unwrap_err();
        assert!(e.contains("float32") && e.contains("f64"), "{e}");
        let e = parse_arg(&spec, &leaf(Scalar::F32, 1)).unwrap_err();
        assert!(
            e.contains("2-d array of shape (2, 2)") && e.contains("a 1-d array of f32"),
            "{e}"
        );
        let e = parse_arg(&spec, &Shape::Tuple(vec![leaf(Scalar::F32, 2)])).unwrap_err();
        assert!(e.contains("tuple"), "{e}");
        // Unsupported dtype: a hand-written uint8 file.
        let u8file = dir.file("u8.npy");
        let mut buf = vec![];
        {
            use npyz::WriterBuilder;
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&[2])
                .writer(&mut buf)
                .begin_nd()
                .unwrap();
            w.extend([1u8, 2u8]).unwrap();
            w.finish().unwrap();
        }
        std::fs::write(&u8file, buf).unwrap();
        let e = parse_arg(&format!("@{}", u8file.display()), &leaf(Scalar::I64, 1)).unwrap_err();
        assert!(e.contains("unsupported dtype"), "{e}");
        // Not an npy file at all.
        let junk = dir.file("junk.npy");
        std::fs::write(&junk, "hello").unwrap();
        assert!(
            read_npy(&junk)
                .unwrap_err()
                .contains("not a valid .npy file")
        );
        // Tuples cannot be written.
        let e = write_npy(&dir.file("t.npy"), &Value::Tuple(vec![Value::F64(1.0)])).unwrap_err();
        assert_eq!(
            e,
            "--output .npy needs a single array result; this entry returns a tuple"
        );
        // Unwritable path.
        let e = write_npy(&dir.file("no/such/dir/x.npy"), &Value::F64(1.0)).unwrap_err();
        assert!(e.starts_with("cannot write "), "{e}");
    }
}
