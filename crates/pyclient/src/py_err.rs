//! The memfleet exceptions the bindings raise.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;

use crate::wire::WireError;

static SERVER_ERROR: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static CONNECTION_ERROR: GILOnceCell<Py<PyType>> = GILOnceCell::new();

fn error_type(
    py: Python<'_>,
    cell: &'static GILOnceCell<Py<PyType>>,
    name: &str,
) -> PyResult<Py<PyType>> {
    cell.get_or_try_init(py, || {
        let t = py.import("memfleet.errors")?.getattr(name)?;
        Ok::<_, PyErr>(t.downcast_into::<PyType>()?.unbind())
    })
    .map(|t| t.clone_ref(py))
}

/// `MemfleetServerError` with the reply line the server sent.
pub(crate) fn server_error(py: Python<'_>, e: WireError) -> PyErr {
    let text = String::from_utf8_lossy(&e.0).into_owned();
    match error_type(py, &SERVER_ERROR, "MemfleetServerError") {
        Ok(t) => PyErr::from_type(t.into_bound(py), text),
        Err(err) => err,
    }
}

pub(crate) fn connection_error(py: Python<'_>, text: String) -> PyErr {
    match error_type(py, &CONNECTION_ERROR, "MemfleetConnectionError") {
        Ok(t) => PyErr::from_type(t.into_bound(py), text),
        Err(err) => err,
    }
}
