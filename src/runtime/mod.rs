//! Values shared by every backend and by the public API, and their
//! conversion from and to JSON and NumPy `.npy`.

pub mod buf;
pub mod data;
pub mod json_stream;
pub mod npy;
pub mod output;
pub mod trace;
pub mod value;

pub use buf::Buf;
pub use output::{ForeignBuf, OutArray, Output};
pub use value::{ArgRef, Array, ArrayData, ArrayRef, Value};
