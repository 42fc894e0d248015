//! The data readers on arbitrary bytes: the first byte picks the reader
//! (`.npy` decoding, or JSON text converted to one of a few parameter
//! shapes); the rest is the input. Every outcome must be a value or an
//! error message, never a panic, and a decoded `.npy` value must encode and
//! decode back to itself.
#![no_main]
use arden::ir::{Scalar, Shape, Size, Type, VarId};
use arden::runtime::data;
use libfuzzer_sys::fuzz_target;

fn leaf(elem: Scalar, rank: usize) -> Shape {
    Shape::Leaf(Type::array(elem, (0..rank).map(|k| Size::var(VarId(k as u32))).collect()))
}

fuzz_target!(|input: &[u8]| {
    let Some((&sel, rest)) = input.split_first() else {
        return;
    };
    if sel % 2 == 0 {
        if let Ok(v) = data::npy_from_bytes("fuzz.npy", rest) {
            let bytes = data::npy_bytes(&v).expect("arrays and scalars encode");
            let back = data::npy_from_bytes("again.npy", &bytes).expect("our own encoding decodes");
            assert_eq!(back.to_json(), v.to_json());
        }
        return;
    }
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let elems = [Scalar::F64, Scalar::F32, Scalar::I64, Scalar::I32, Scalar::Bool];
    let elem = elems[(sel as usize / 2) % elems.len()];
    let rank = (sel as usize / 10) % 4;
    let shape = if sel >= 200 { Shape::Tuple(vec![leaf(elem, rank), leaf(Scalar::F64, 0)]) } else { leaf(elem, rank) };
    if let Ok(json) = data::parse_json_text(text) {
        if let Ok(v) = data::value_from_json(&json, &shape) {
            // What we print parses back to the same value.
            let again = data::parse_json_text(&v.to_json()).expect("our JSON parses");
            let w = data::value_from_json(&again, &shape).expect("our JSON converts");
            assert_eq!(w.to_json(), v.to_json());
        }
    }
});
