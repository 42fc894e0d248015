//! JSON and `.npy` data in and out (to be written).
