//! gridrail._kernels: thin PyO3 bindings over plain Rust modules.
//! The logic lives in the modules; the `python` feature adds the bindings, which only convert
//! arguments.

pub mod dfa;
pub mod names;
pub mod scan;

#[cfg(feature = "python")]
mod bindings {
    use pyo3::exceptions::{PyOverflowError, PyValueError};
    use pyo3::prelude::*;
    use pyo3::types::PyBytes;

    use crate::{dfa, names, scan};

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

    /// A name set as Python hands it over: (exact spellings, folded spellings, suffix DFA or
    /// None), a DFA as (start, native-endian int32 table bytes, accepting flag bytes).
    type NameSetArgs<'py> = (
        Vec<Bound<'py, PyBytes>>,
        Vec<Bound<'py, PyBytes>>,
        Option<DfaArgs<'py>>,
    );
    type DfaArgs<'py> = (i32, Bound<'py, PyBytes>, Bound<'py, PyBytes>);

    fn dfa(args: &DfaArgs) -> PyResult<dfa::Dfa> {
        let (start, table, accepting) = args;
        let table = scan::ne_i32s(table.as_bytes())
            .ok_or_else(|| PyValueError::new_err("DFA table is not int32 entries"))?;
        let accepting = accepting.as_bytes().iter().map(|&flag| flag != 0).collect();
        dfa::Dfa::new(*start, table, accepting)
            .map_err(|err| PyValueError::new_err(err.to_string()))
    }

    fn automaton(args: &NameSetArgs) -> PyResult<names::NameAutomaton> {
        let (exact, folded, suffix) = args;
        let suffix = suffix.as_ref().map(dfa).transpose()?;
        let exact: Vec<&[u8]> = exact.iter().map(|s| s.as_bytes()).collect();
        let folded: Vec<&[u8]> = folded.iter().map(|s| s.as_bytes()).collect();
        Ok(names::NameAutomaton::new(&exact, &folded, suffix.as_ref()))
    }

    fn names_error(err: names::NamesError) -> PyErr {
        match err {
            names::NamesError::TooManyStates { .. } => PyOverflowError::new_err(err.to_string()),
            _ => PyValueError::new_err(err.to_string()),
        }
    }

    fn ne_bytes<T: Copy, const N: usize>(
        py: Python<'_>,
        values: &[T],
        to: fn(T) -> [u8; N],
    ) -> Py<PyBytes> {
        let bytes: Vec<u8> = values.iter().flat_map(|&v| to(v)).collect();
        PyBytes::new(py, &bytes).unbind()
    }

    /// `name_rows(base, start, slots, bound) -> (transitions, base_of, accepted, alive)`:
    /// `scanner._name_rows` — the states the name automata of `slots` add to the scanner
    /// table `base` (int32 bytes), as native-endian int32 / int32 / uint64 / uint64 bytes.
    /// OverflowError past `bound` states. The GIL is released while it runs.
    #[pyfunction]
    fn name_rows<'py>(
        py: Python<'py>,
        base: &[u8],
        start: i32,
        slots: Vec<NameSetArgs<'py>>,
        bound: usize,
    ) -> PyResult<[Py<PyBytes>; 4]> {
        let base = scan::ne_i32s(base)
            .ok_or_else(|| PyValueError::new_err("scanner table is not int32 entries"))?;
        let automata = slots.iter().map(automaton).collect::<PyResult<Vec<_>>>()?;
        let rows = py
            .allow_threads(|| names::name_rows(&base, start, &automata, bound))
            .map_err(names_error)?;
        Ok([
            ne_bytes(py, &rows.transitions, i32::to_ne_bytes),
            ne_bytes(py, &rows.base_of, i32::to_ne_bytes),
            ne_bytes(py, &rows.accepted, u64::to_ne_bytes),
            ne_bytes(py, &rows.alive, u64::to_ne_bytes),
        ])
    }

    /// `names_outside(names, dfa) -> bytes | None`: `NameAutomaton.outside` — a shortest
    /// name-spelled lexeme that `dfa` rejects, None if there is none.
    #[pyfunction]
    fn names_outside<'py>(
        py: Python<'py>,
        names: NameSetArgs<'py>,
        dfa_args: DfaArgs<'py>,
    ) -> PyResult<Option<Py<PyBytes>>> {
        let automaton = automaton(&names)?;
        let dfa = dfa(&dfa_args)?;
        let witness = py.allow_threads(|| automaton.outside(&dfa));
        Ok(witness.map(|w| PyBytes::new(py, &w).unbind()))
    }

    /// `fullmatch_many(dfa, texts) -> bytes`: per text 1 if `ByteDFA.fullmatch` takes it, else 0.
    #[pyfunction]
    fn fullmatch_many<'py>(
        py: Python<'py>,
        dfa_args: DfaArgs<'py>,
        texts: Vec<Bound<'py, PyBytes>>,
    ) -> PyResult<Py<PyBytes>> {
        let dfa = dfa(&dfa_args)?;
        let flags: Vec<u8> = texts
            .iter()
            .map(|t| u8::from(dfa.fullmatch(t.as_bytes())))
            .collect();
        Ok(PyBytes::new(py, &flags).unbind())
    }

    #[pymodule]
    fn _kernels(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<PyScanTable>()?;
        m.add_function(wrap_pyfunction!(name_rows, m)?)?;
        m.add_function(wrap_pyfunction!(names_outside, m)?)?;
        m.add_function(wrap_pyfunction!(fullmatch_many, m)?)?;
        Ok(())
    }
}
