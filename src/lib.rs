//! gridrail._kernels: thin PyO3 bindings over plain Rust modules.
//! The logic lives in the modules; the `python` feature adds the bindings, which only convert
//! arguments.

pub mod scan;

#[cfg(feature = "python")]
mod bindings {
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;
    use pyo3::types::PyBytes;

    use crate::scan;

    /// Inputs at least this long are scanned with the GIL released.
    const RELEASE_GIL_FROM: usize = 1 << 16;

    /// `ScanTable(transitions, accepting)`: `transitions` is the flat table of a
    /// `ScannerAutomaton`, either as native-endian int32 `bytes` (`array('i').tobytes()`) or as a
    /// sequence of ints; `accepting` is `bytes` with one flag per state (1 = accepting, 0 = not).
    #[pyclass(name = "ScanTable", module = "gridrail._kernels", frozen)]
    struct PyScanTable(scan::ScanTable);

    #[pymethods]
    impl PyScanTable {
        #[new]
        fn new(transitions: &Bound<'_, PyAny>, accepting: &[u8]) -> PyResult<Self> {
            let table = match transitions.downcast::<PyBytes>() {
                Ok(bytes) => scan::ScanTable::from_ne_bytes(bytes.as_bytes(), accepting),
                Err(_) => scan::ScanTable::new(transitions.extract::<Vec<i32>>()?, accepting),
            };
            table.map(Self).map_err(value_error)
        }

        #[getter]
        fn num_states(&self) -> usize {
            self.0.num_states()
        }

        /// `run(state, data) -> (state, consumed, accept_end, accept_state)`, exactly
        /// `ScannerAutomaton.run`.
        fn run(
            &self,
            py: Python<'_>,
            state: i64,
            data: &[u8],
        ) -> PyResult<(i32, usize, isize, i32)> {
            let result = if data.len() >= RELEASE_GIL_FROM {
                py.allow_threads(|| self.0.run(state, data))
            } else {
                self.0.run(state, data)
            };
            result.map(scan::Scan::to_tuple).map_err(value_error)
        }
    }

    fn value_error(err: scan::ScanError) -> PyErr {
        PyValueError::new_err(err.to_string())
    }

    #[pymodule]
    fn _kernels(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<PyScanTable>()?;
        Ok(())
    }
}
