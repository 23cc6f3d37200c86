//! The `memfleet._native` module: what it holds.

use pyo3::prelude::*;

use crate::py::{
    key_hash, points_for, req_get_many, valid_key, zstd_sequences_use_dictionary_tables, Conn, Ring,
};
use crate::py_many::{plan_fetch, FetchPlan};

// Safe without the GIL: every class is Sync (the ring memo is behind a Mutex), and a connection
// or reader is used by one thread at a time (the pool hands it out)
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Conn>()?;
    m.add_class::<Ring>()?;
    m.add_class::<FetchPlan>()?;
    m.add_function(wrap_pyfunction!(key_hash, m)?)?;
    m.add_function(wrap_pyfunction!(points_for, m)?)?;
    m.add_function(wrap_pyfunction!(req_get_many, m)?)?;
    m.add_function(wrap_pyfunction!(plan_fetch, m)?)?;
    m.add_function(wrap_pyfunction!(valid_key, m)?)?;
    m.add_function(wrap_pyfunction!(zstd_sequences_use_dictionary_tables, m)?)?;
    m.add("MAX_KEY", crate::wire::MAX_KEY)?;
    crate::py_reply::register(m)?;
    Ok(())
}
