//! Conversions between GradBench's JSON and arden values: reading the
//! fields of an `input` object as scalars or regular arrays of a given
//! rank, and writing results back as JSON numbers and lists.

use crate::runtime::Value;
use crate::runtime::value::ArrayData;
use serde_json::Value as Json;

/// `input[name]`, or an error naming the missing field.
pub fn field<'a>(input: &'a Json, name: &str) -> Result<&'a Json, String> {
    match input {
        Json::Object(map) => map.get(name).ok_or_else(|| format!("the input has no field `{name}`")),
        _ => Err(format!("the input must be a JSON object with a field `{name}`, not {}", kind(input))),
    }
}

/// A short description of a JSON value's kind, for error messages.
pub fn kind(j: &Json) -> &'static str {
    match j {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

/// A JSON number as an f64.
pub fn number(j: &Json, what: &str) -> Result<f64, String> {
    j.as_f64().ok_or_else(|| format!("`{what}` must be a number, not {}", kind(j)))
}

/// A JSON integer (a number with no fractional part, e.g. `3` or `3.0`).
pub fn integer(j: &Json, what: &str) -> Result<i64, String> {
    if let Some(k) = j.as_i64() {
        return Ok(k);
    }
    match j.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(x as i64),
        Some(x) => Err(format!("`{what}` must be an integer, not {x}")),
        None => Err(format!("`{what}` must be an integer, not {}", kind(j))),
    }
}

pub fn boolean(j: &Json, what: &str) -> Result<bool, String> {
    j.as_bool().ok_or_else(|| format!("`{what}` must be true or false, not {}", kind(j)))
}

/// Walk a nested list of the given rank, checking it is regular, and
/// return its shape and its leaves in row-major order.
fn regular<'a>(j: &'a Json, rank: usize, what: &str) -> Result<(Vec<usize>, Vec<&'a Json>), String> {
    let mut shape: Vec<Option<usize>> = vec![None; rank];
    let mut leaves = Vec::new();
    walk(j, 0, rank, &mut shape, &mut leaves, what)?;
    // Axes under an empty axis have length 0.
    Ok((shape.into_iter().map(|d| d.unwrap_or(0)).collect(), leaves))
}

fn walk<'a>(j: &'a Json, depth: usize, rank: usize, shape: &mut [Option<usize>], leaves: &mut Vec<&'a Json>, what: &str) -> Result<(), String> {
    if depth == rank {
        if j.is_array() {
            return Err(format!("`{what}` must be a list nested {rank} deep, but it is nested deeper"));
        }
        leaves.push(j);
        return Ok(());
    }
    let Json::Array(items) = j else {
        return Err(format!("`{what}` must be a list nested {rank} deep, but found {} at depth {depth}", kind(j)));
    };
    match shape[depth] {
        None => shape[depth] = Some(items.len()),
        Some(n) if n != items.len() => {
            return Err(format!("`{what}` is not a regular array: lists at depth {depth} have lengths {n} and {}", items.len()));
        }
        _ => {}
    }
    for item in items {
        walk(item, depth + 1, rank, shape, leaves, what)?;
    }
    Ok(())
}

/// A regular nested list of numbers of the given rank as an f64 array.
pub fn f64_array(j: &Json, rank: usize, what: &str) -> Result<Value, String> {
    let (shape, leaves) = regular(j, rank, what)?;
    let data = leaves
        .into_iter()
        .map(|x| x.as_f64().ok_or_else(|| format!("`{what}` must hold numbers, but holds {}", kind(x))))
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(Value::array(shape, ArrayData::F64(data.into())))
}

/// A regular nested list of integers of the given rank as an i64 array.
pub fn i64_array(j: &Json, rank: usize, what: &str) -> Result<Value, String> {
    let (shape, leaves) = regular(j, rank, what)?;
    let data = leaves.into_iter().map(|x| integer(x, what)).collect::<Result<Vec<i64>, String>>()?;
    Ok(Value::array(shape, ArrayData::I64(data.into())))
}

/// The shape of an array value (empty for scalars).
pub fn shape(v: &Value) -> Vec<usize> {
    v.shape()
}

/// A result value as JSON: arrays as nested lists, tuples as lists,
/// non-finite floats as `null` (JSON has no NaN or infinity).
pub fn to_json(v: &Value) -> Json {
    match v {
        Value::F64(x) => Json::from(*x),
        Value::F32(x) => Json::from(*x as f64),
        Value::I64(x) => Json::from(*x),
        Value::I32(x) => Json::from(*x),
        Value::Bool(b) => Json::from(*b),
        Value::Tuple(vs) => Json::Array(vs.iter().map(to_json).collect()),
        Value::Array(a) => nested(&a.shape, &a.data, 0),
    }
}

fn nested(shape: &[usize], data: &ArrayData, offset: usize) -> Json {
    if shape.is_empty() {
        return leaf(data, offset);
    }
    let stride: usize = shape[1..].iter().product();
    Json::Array((0..shape[0]).map(|i| nested(&shape[1..], data, offset + i * stride)).collect())
}

fn leaf(data: &ArrayData, i: usize) -> Json {
    match data {
        ArrayData::F64(v) => Json::from(v[i]),
        ArrayData::F32(v) => Json::from(v[i] as f64),
        ArrayData::I64(v) => Json::from(v[i]),
        ArrayData::I32(v) => Json::from(v[i]),
        ArrayData::Bool(v) => Json::from(v[i]),
    }
}

/// The elements of an f64 array (or a scalar) in row-major order.
pub fn f64_data(v: &Value) -> Result<Vec<f64>, String> {
    match v {
        Value::F64(x) => Ok(vec![*x]),
        Value::Array(a) => match &a.data {
            ArrayData::F64(d) => Ok(d.to_vec()),
            other => Err(format!("internal: expected f64 data, found {}", other.scalar().name())),
        },
        _ => Err("internal: expected an f64 array".to_string()),
    }
}

/// The elements of an i64 array in row-major order.
pub fn i64_data(v: &Value) -> Result<Vec<i64>, String> {
    match v {
        Value::I64(x) => Ok(vec![*x]),
        Value::Array(a) => match &a.data {
            ArrayData::I64(d) => Ok(d.to_vec()),
            other => Err(format!("internal: expected i64 data, found {}", other.scalar().name())),
        },
        _ => Err("internal: expected an i64 array".to_string()),
    }
}

/// Component `k` of a tuple result.
pub fn component(v: &Value, k: usize) -> Result<&Value, String> {
    match v {
        Value::Tuple(vs) if k < vs.len() => Ok(&vs[k]),
        _ => Err(format!("internal: expected a tuple with a component {k}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_regular_arrays() {
        let v = f64_array(&json!([[1, 2.5], [3, 4]]), 2, "x").unwrap();
        assert_eq!(v.shape(), vec![2, 2]);
        assert_eq!(f64_data(&v).unwrap(), vec![1.0, 2.5, 3.0, 4.0]);
        let e = f64_array(&json!([[]]), 2, "l").unwrap();
        assert_eq!(e.shape(), vec![1, 0]);
        let e = f64_array(&json!([]), 3, "m").unwrap();
        assert_eq!(e.shape(), vec![0, 0, 0]);
        let k = i64_array(&json!([[0, 1, 2]]), 2, "t").unwrap();
        assert_eq!(i64_data(&k).unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn refuses_irregular_or_wrong_rank_arrays() {
        let e = f64_array(&json!([[1, 2], [3]]), 2, "x").unwrap_err();
        assert!(e.contains("not a regular array"), "{e}");
        let e = f64_array(&json!([1, 2]), 2, "x").unwrap_err();
        assert!(e.contains("nested 2 deep"), "{e}");
        let e = f64_array(&json!([[1, 2]]), 1, "x").unwrap_err();
        assert!(e.contains("nested deeper"), "{e}");
        let e = f64_array(&json!(["a"]), 1, "x").unwrap_err();
        assert!(e.contains("must hold numbers"), "{e}");
        let e = i64_array(&json!([1.5]), 1, "c").unwrap_err();
        assert!(e.contains("must be an integer"), "{e}");
        assert_eq!(integer(&json!(4.0), "n").unwrap(), 4);
        assert!(field(&json!(3), "x").unwrap_err().contains("JSON object"));
        assert!(field(&json!({}), "x").unwrap_err().contains("no field `x`"));
    }

    #[test]
    fn writes_values() {
        let v = Value::array(vec![2, 1], ArrayData::F64(vec![1.0, -0.5].into()));
        assert_eq!(to_json(&v), json!([[1.0], [-0.5]]));
        let t = Value::Tuple(vec![Value::I64(3), Value::F64(f64::NAN)]);
        assert_eq!(to_json(&t), json!([3, null]));
        assert_eq!(serde_json::to_string(&to_json(&Value::F64(2.0))).unwrap(), "2.0");
    }
}
