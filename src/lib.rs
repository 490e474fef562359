//! gridrail._kernels: thin PyO3 bindings over plain Rust modules.
//! The logic lives in the modules; the `python` feature adds the bindings, which only convert
//! arguments.

pub mod below;
pub mod bitmask;
pub mod canonical;
pub mod dfa;
pub mod interner;
pub mod lalr;
pub mod names;
pub mod residue;
pub mod scan;
pub mod slot_scan;
pub mod union;
pub mod walk;

#[cfg(feature = "python")]
mod bindings {
    use pyo3::buffer::PyBuffer;
    use pyo3::exceptions::{PyBufferError, PyOverflowError, PyValueError};
    use pyo3::ffi;
    use pyo3::prelude::*;
    use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

    use std::collections::HashMap;
    use std::os::raw::{c_char, c_int, c_void};

    /// The format of a ScanTable's buffer: unsigned bytes (a static C string: never freed).
    const BYTE_FORMAT: &std::ffi::CStr = c"B";

    use crate::{
        below, bitmask, canonical, dfa, lalr, names, residue, scan, slot_scan, union, walk,
    };

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

        /// The transitions as a read-only buffer of native-endian int32 bytes (format "B";
        /// `memoryview(table).cast("i")` reads the entries): a table the kernels built is
        /// not copied into Python.
        unsafe fn __getbuffer__(
            slf: Bound<'_, Self>,
            view: *mut ffi::Py_buffer,
            flags: c_int,
        ) -> PyResult<()> {
            if view.is_null() {
                return Err(PyBufferError::new_err("no buffer view to fill"));
            }
            if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
                return Err(PyBufferError::new_err("a ScanTable is read-only"));
            }
            let entries = slf.get().0.transitions();
            // SAFETY: `view.obj` holds a reference to the table, which is frozen: its entries
            // stay where they are, unchanged, while the view lives.
            unsafe {
                (*view).buf = entries.as_ptr() as *mut c_void;
                (*view).len = std::mem::size_of_val(entries) as isize;
                (*view).obj = slf.into_any().into_ptr();
                (*view).readonly = 1;
                (*view).itemsize = 1;
                (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                    BYTE_FORMAT.as_ptr() as *mut c_char
                } else {
                    std::ptr::null_mut()
                };
                (*view).ndim = 1;
                (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                    &mut (*view).len
                } else {
                    std::ptr::null_mut()
                };
                (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                    &mut (*view).itemsize
                } else {
                    std::ptr::null_mut()
                };
                (*view).suboffsets = std::ptr::null_mut();
                (*view).internal = std::ptr::null_mut();
            }
            Ok(())
        }

        /// `canonical_order(state) -> bytes`: the states reachable from `state` in
        /// `ScannerAutomaton._canonical_identity`'s order, as native-endian uint32.
        fn canonical_order<'py>(
            &self,
            py: Python<'py>,
            state: i64,
        ) -> PyResult<Bound<'py, PyBytes>> {
            let order = self.0.canonical_order(state).map_err(value_error)?;
            let bytes: Vec<u8> = order.iter().flat_map(|s| s.to_ne_bytes()).collect();
            Ok(PyBytes::new(py, &bytes))
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

    fn value_error(err: impl std::fmt::Display) -> PyErr {
        PyValueError::new_err(err.to_string())
    }

    /// A name set as Python hands it over: (exact spellings, folded spellings, suffix DFA or
    /// None), a DFA as (start, native-endian int32 table bytes, accepting flag bytes). The
    /// spellings are read as UTF-8 where they lie, without a copy each.
    type NameSetArgs<'py> = (
        Vec<Bound<'py, PyString>>,
        Vec<Bound<'py, PyString>>,
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
        let (exact, folded) = (utf8_all(exact)?, utf8_all(folded)?);
        Ok(names::NameAutomaton::new(
            &exact.iter().map(|s| s.as_bytes()).collect::<Vec<_>>(),
            &folded.iter().map(|s| s.as_bytes()).collect::<Vec<_>>(),
            suffix.as_ref(),
        ))
    }

    fn utf8_all<'a>(texts: &'a [Bound<'_, PyString>]) -> PyResult<Vec<&'a str>> {
        texts.iter().map(|s| s.to_str()).collect()
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
        PyBytes::new_with(py, values.len() * N, |out| {
            for (chunk, &v) in out.chunks_exact_mut(N).zip(values) {
                chunk.copy_from_slice(&to(v));
            }
            Ok(())
        })
        .expect("filling a new bytes object cannot fail")
        .unbind()
    }

    /// `name_rows(base, start, accepting, slots, bound) -> (table, base_of, accepted, alive)`:
    /// `scanner._name_rows` — the scanner table `base` (int32 bytes; `accepting`: its states'
    /// flags, 1 or 0) with the states the `NameAutomaton`s of `slots` add: the whole table as a
    /// `ScanTable` (its buffer is the table's int32 entries), then per new state its base state,
    /// accepting and live slots, as native-endian int32 / uint64 / uint64 bytes.
    /// OverflowError past `bound` states. The GIL is released while it runs.
    #[pyfunction]
    fn name_rows<'py>(
        py: Python<'py>,
        base: &[u8],
        start: i32,
        accepting: &[u8],
        slots: Vec<Bound<'py, PyNameAutomaton>>,
        bound: usize,
    ) -> PyResult<(PyScanTable, [Py<PyBytes>; 3])> {
        let base = scan::ScanTable::from_ne_bytes(base, accepting).map_err(value_error)?;
        let automata: Vec<&names::NameAutomaton> = slots.iter().map(|s| &s.get().0).collect();
        let (rows, table) = py
            .allow_threads(|| {
                let rows = names::name_rows(base.transitions(), start, &automata, bound)?;
                let table = rows.scan_table(base.transitions(), base.accepting());
                Ok((rows, table))
            })
            .map_err(names_error)?;
        Ok((
            PyScanTable(table),
            [
                ne_bytes(py, &rows.base_of, i32::to_ne_bytes),
                ne_bytes(py, &rows.accepted, u64::to_ne_bytes),
                ne_bytes(py, &rows.alive, u64::to_ne_bytes),
            ],
        ))
    }

    /// `NameAutomaton(exact, folded, suffix)`: `NameSet.automaton` of a name set given as
    /// `NameSetArgs`, built once for both of its uses (the W ⊆ R check, the scanner's rows).
    #[pyclass(name = "NameAutomaton", module = "gridrail._kernels", frozen)]
    struct PyNameAutomaton(names::NameAutomaton);

    #[pymethods]
    impl PyNameAutomaton {
        #[new]
        #[pyo3(signature = (exact, folded, suffix))]
        fn new<'py>(
            exact: Vec<Bound<'py, PyString>>,
            folded: Vec<Bound<'py, PyString>>,
            suffix: Option<DfaArgs<'py>>,
        ) -> PyResult<Self> {
            automaton(&(exact, folded, suffix)).map(Self)
        }

        /// `outside(dfa) -> bytes | None`: `NameAutomaton.outside` — a shortest name-spelled
        /// lexeme that `dfa` rejects, None if there is none.
        fn outside<'py>(
            &self,
            py: Python<'py>,
            dfa_args: DfaArgs<'py>,
        ) -> PyResult<Option<Py<PyBytes>>> {
            let dfa = dfa(&dfa_args)?;
            let witness = py.allow_threads(|| self.0.outside(&dfa));
            Ok(witness.map(|w| PyBytes::new(py, &w).unbind()))
        }
    }

    /// `literal_alternation(exact, folded) -> str`: `NameSet.pattern`'s alternatives, the
    /// exact spellings' then the folded ones', joined by `|`.
    #[pyfunction]
    fn literal_alternation(
        exact: Vec<Bound<'_, PyString>>,
        folded: Vec<Bound<'_, PyString>>,
    ) -> PyResult<String> {
        Ok(names::literal_alternation(
            &utf8_all(&exact)?,
            &utf8_all(&folded)?,
        ))
    }

    /// Nesting deeper than this is left to Python's encoder (which raises RecursionError where
    /// it must): a document this package builds is a few levels deep.
    const CANONICAL_DEPTH: usize = 64;

    /// `canonical_json(doc, sort_keys) -> str | None`: `gridrail.canonical.canonical_json`'s
    /// text for a document of dicts with str keys, lists, tuples (and `NamedTuple`s), str, int
    /// (64-bit), bool and None (exact types otherwise); None for anything else (a float, another
    /// subclass, a string with a lone surrogate), which the caller then encodes with Python's
    /// `json`.
    #[pyfunction]
    fn canonical_json(doc: &Bound<'_, PyAny>, sort_keys: bool) -> Option<String> {
        let mut out = String::new();
        write_json(doc, sort_keys, 0, &mut out).then_some(out)
    }

    /// Is `tuple` a tuple, or of a subclass that iterates as one (a `NamedTuple`: a schema's
    /// columns)? Python's encoder writes any tuple subclass as an array of what iterating it
    /// gives, so one that redefines `__iter__` is left to it.
    fn iterates_as_tuple(tuple: &Bound<'_, PyTuple>) -> bool {
        if tuple.is_exact_instance_of::<PyTuple>() {
            return true;
        }
        // SAFETY: both are live type objects; PyType_GetSlot reads a slot of either
        unsafe {
            let own = ffi::PyType_GetSlot(ffi::Py_TYPE(tuple.as_ptr()), ffi::Py_tp_iter);
            let base = ffi::PyType_GetSlot(&raw mut ffi::PyTuple_Type, ffi::Py_tp_iter);
            own == base
        }
    }

    /// Writes `value` (false: a value `canonical_json` leaves to Python).
    fn write_json(
        value: &Bound<'_, PyAny>,
        sort_keys: bool,
        depth: usize,
        out: &mut String,
    ) -> bool {
        if depth > CANONICAL_DEPTH {
            return false;
        }
        // the common kinds first: a catalog's documents are mostly strings in lists
        if let Ok(text) = value.downcast_exact::<PyString>() {
            match text.to_str() {
                Ok(text) => canonical::push_string(out, text),
                Err(_) => return false, // a lone surrogate: not UTF-8
            }
        } else if value.is_none() {
            out.push_str("null");
        } else if let Ok(flag) = value.downcast_exact::<PyBool>() {
            out.push_str(if flag.is_true() { "true" } else { "false" });
        } else if let Ok(number) = value.downcast_exact::<PyInt>() {
            match number.extract::<i64>() {
                Ok(number) => out.push_str(&number.to_string()),
                Err(_) => return false,
            }
        } else if let Ok(list) = value.downcast_exact::<PyList>() {
            return write_items(list.iter(), sort_keys, depth, out);
        } else if let Ok(tuple) = value.downcast::<PyTuple>() {
            if !iterates_as_tuple(tuple) {
                return false;
            }
            return write_items(tuple.iter(), sort_keys, depth, out);
        } else if let Ok(dict) = value.downcast_exact::<PyDict>() {
            let mut entries = Vec::with_capacity(dict.len());
            for (key, item) in dict.iter() {
                // Python turns other keys into strings its own way; a lone surrogate is no UTF-8
                let Some(key) = key
                    .downcast_exact::<PyString>()
                    .ok()
                    .and_then(|k| k.to_str().ok().map(str::to_owned))
                else {
                    return false;
                };
                entries.push((key, item));
            }
            if sort_keys {
                // code point order, as Python sorts str keys: UTF-8's byte order
                entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical::push_string(out, key);
                out.push(':');
                if !write_json(item, sort_keys, depth + 1, out) {
                    return false;
                }
            }
            out.push('}');
        } else {
            return false;
        }
        true
    }

    /// Writes a JSON array of `items` (false: one of them is left to Python).
    fn write_items<'py>(
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        sort_keys: bool,
        depth: usize,
        out: &mut String,
    ) -> bool {
        out.push('[');
        for (i, item) in items.enumerate() {
            if i > 0 {
                out.push(',');
            }
            if !write_json(&item, sort_keys, depth + 1, out) {
                return false;
            }
        }
        out.push(']');
        true
    }

    /// `union_scanner(parts, max_states, max_work) -> (transitions, accepts, live) | None`:
    /// `scanner._union_scanner` — the minimal union automaton of `parts` (terminal index, DFA),
    /// its table as native-endian int32 bytes and per state the terminals accepted and live;
    /// no state when nothing can match; None past the bounds. The GIL is released while it
    /// runs.
    #[pyfunction]
    fn union_scanner<'py>(
        py: Python<'py>,
        parts: Vec<(u32, DfaArgs<'py>)>,
        max_states: usize,
        max_work: u64,
    ) -> PyResult<Option<UnionParts>> {
        let parts = parts
            .iter()
            .map(|(index, args)| Ok((*index, dfa(args)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let Ok(union) = py.allow_threads(|| union::union_scanner(&parts, max_states, max_work))
        else {
            return Ok(None);
        };
        let transitions = ne_bytes(py, &union.transitions, i32::to_ne_bytes);
        Ok(Some((transitions, union.accepts, union.live)))
    }

    type UnionParts = (Py<PyBytes>, Vec<Vec<u32>>, Vec<Vec<u32>>);

    /// `lalr_tables(terminals, nonterminals, lhs, rhs, start) -> (kernels, goto, action) |
    /// None`: `gridrail.grammar.lalr.build_lalr`'s tables over the coded augmented grammar
    /// (`lalr::Grammar`) as `LalrTables` holds them — per state a tuple of (production, dot)
    /// kernel items, a dict nonterminal → target and a dict terminal → action, both in
    /// increasing key order; None when it is not LALR(1). The GIL is released while it builds.
    #[pyfunction]
    fn lalr_tables<'py>(
        py: Python<'py>,
        terminals: usize,
        nonterminals: usize,
        lhs: Vec<u32>,
        rhs: Vec<Vec<u32>>,
        start: u32,
    ) -> PyResult<Option<LalrParts<'py>>> {
        let grammar = lalr::Grammar {
            terminals,
            nonterminals,
            lhs: &lhs,
            rhs: &rhs,
            start,
        };
        grammar.check().map_err(value_error)?;
        let Some(t) = py.allow_threads(|| lalr::build(&grammar)) else {
            return Ok(None);
        };
        let kernels = t
            .kernels
            .iter()
            .map(|k| PyTuple::new(py, k))
            .collect::<PyResult<Vec<_>>>()?;
        let goto = t
            .transitions
            .iter()
            .map(|row| {
                let nonterminal = row.iter().filter(|&&(s, _)| s as usize >= terminals);
                dict_of(
                    py,
                    nonterminal.map(|&(s, target)| (s - terminals as u32, target as i64)),
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        let action = t
            .actions
            .iter()
            .map(|row| dict_of(py, row.iter().copied()))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Some((
            PyTuple::new(py, kernels)?,
            PyTuple::new(py, goto)?,
            PyTuple::new(py, action)?,
        )))
    }

    /// A dict of `pairs`, in their order.
    fn dict_of<'py>(
        py: Python<'py>,
        pairs: impl Iterator<Item = (u32, i64)>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (key, value) in pairs {
            dict.set_item(key, value)?;
        }
        Ok(dict)
    }

    type LalrParts<'py> = (
        Bound<'py, PyTuple>,
        Bound<'py, PyTuple>,
        Bound<'py, PyTuple>,
    );

    /// `spell_forms(words, open, close, doubles, dfa, shadows) -> (bytes, list[str])`:
    /// `lexicon._spelled` — per word 1 if its form in the quote style is kept, else 0, and the
    /// kept forms.
    #[pyfunction]
    fn spell_forms<'py>(
        py: Python<'py>,
        words: Vec<Bound<'py, PyString>>,
        open: &str,
        close: &str,
        doubles: bool,
        dfa_args: DfaArgs<'py>,
        shadows: Vec<DfaArgs<'py>>,
    ) -> PyResult<(Py<PyBytes>, Vec<String>)> {
        let takes = dfa(&dfa_args)?;
        let shadows = shadows.iter().map(dfa).collect::<PyResult<Vec<_>>>()?;
        let words = utf8_all(&words)?;
        let (flags, kept) = names::spell_forms(&words, open, close, doubles, &takes, &shadows);
        Ok((PyBytes::new(py, &flags).unbind(), kept))
    }

    /// `distinct_spellings(texts, fold) -> tuple | None`: `NameSet.__post_init__`'s field —
    /// `texts` (a tuple or list of str; ASCII letters lower-cased if `fold`) sorted, each once —
    /// `texts` itself when it is already that tuple, else a new tuple reusing the given str
    /// objects that need no change. None for a str with a lone surrogate (Python then does it).
    #[pyfunction]
    fn distinct_spellings<'py>(
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        fold: bool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let items: Vec<Bound<'py, PyString>> = texts.extract()?;
        let Ok(strs) = utf8_all(&items) else {
            return Ok(None);
        };
        // keys: the text, or its lower-case copy where folding changes it
        let lowered: Vec<Option<String>> = strs
            .iter()
            .map(|s| {
                (fold && s.bytes().any(|b| b.is_ascii_uppercase())).then(|| s.to_ascii_lowercase())
            })
            .collect();
        let keys: Vec<&[u8]> = strs
            .iter()
            .zip(&lowered)
            .map(|(s, low)| low.as_deref().unwrap_or(s).as_bytes())
            .collect();
        let order = names::distinct_order(&keys);
        let unchanged = order.len() == items.len()
            && order
                .iter()
                .enumerate()
                .all(|(i, &j)| i == j && lowered[j].is_none());
        if unchanged && texts.is_exact_instance_of::<PyTuple>() {
            return Ok(Some(texts.clone()));
        }
        let out = order.iter().map(|&j| match &lowered[j] {
            Some(low) => PyString::new(py, low).into_any(),
            None => items[j].clone().into_any(),
        });
        Ok(Some(PyTuple::new(py, out)?.into_any()))
    }

    /// `write_mask_row(bitmask, row, bits) -> bool`: `TokenSet.write_row` (and the checks of
    /// `Matcher.fill_bitmask`) in one call — copy the mask `bits` (a `TokenSet`'s bytearray,
    /// little-endian words) into row `row` of `bitmask` when it is a writable 2-D int32 buffer
    /// (a NumPy array) whose rows are `len(bits)` contiguous bytes and `row` an int inside it.
    /// False, writing nothing, for anything else: the Python path then converts or raises.
    #[pyfunction]
    fn write_mask_row(
        bitmask: &Bound<'_, PyAny>,
        row: &Bound<'_, PyAny>,
        bits: &Bound<'_, PyByteArray>,
    ) -> bool {
        if !row.is_exact_instance_of::<PyInt>() {
            return false;
        }
        let (Ok(row), Ok(buffer)) = (row.extract::<i64>(), PyBuffer::<i32>::get(bitmask)) else {
            return false;
        };
        // PyO3 takes a big-endian ">i" for i32 on a little-endian host: the format is read here;
        // an indirect (PIL-style) buffer's rows are not at stride offsets
        let indirect = buffer
            .suboffsets()
            .is_some_and(|s| s.iter().any(|&o| o >= 0));
        if buffer.readonly() || indirect || !bitmask::is_little_int32(buffer.format().to_bytes()) {
            return false;
        }
        // SAFETY: the GIL is held and no Python code runs until the copy ends, so the
        // bytearray is neither resized nor freed meanwhile.
        let bits = unsafe { bits.as_bytes() };
        let Some(offset) = bitmask::row_offset(
            buffer.shape(),
            buffer.strides(),
            buffer.item_size(),
            row,
            bits.len(),
        ) else {
            return false;
        };
        // SAFETY: `row_offset` checked that the row lies inside the buffer and that its
        // `bits.len()` bytes are contiguous; the buffer is writable and held until the end.
        unsafe {
            let start = (buffer.buf_ptr() as *mut u8).offset(offset);
            std::ptr::copy_nonoverlapping(bits.as_ptr(), start, bits.len());
        }
        true
    }

    /// `bytes` as native-endian values of `N` bytes each (`kind` names them in the error).
    fn ne_values<T, const N: usize>(
        bytes: &[u8],
        what: &str,
        kind: &str,
        from: fn([u8; N]) -> T,
    ) -> PyResult<Vec<T>> {
        if !bytes.len().is_multiple_of(N) {
            return Err(PyValueError::new_err(format!(
                "{what} is not {kind} entries"
            )));
        }
        Ok(bytes
            .chunks_exact(N)
            .map(|c| from(c.try_into().expect("chunks of N bytes")))
            .collect())
    }

    fn ne_u64s(bytes: &[u8], what: &str) -> PyResult<Vec<u64>> {
        ne_values(bytes, what, "uint64", u64::from_ne_bytes)
    }

    fn i32s(bytes: &[u8], what: &str) -> PyResult<Vec<i32>> {
        scan::ne_i32s(bytes)
            .ok_or_else(|| PyValueError::new_err(format!("{what} is not int32 entries")))
    }

    fn walk_error(err: walk::WalkError) -> PyErr {
        PyValueError::new_err(err.to_string())
    }

    /// `TrieTable(edge, depth, size, token_id, aliases)`: `gridrail.vocab.trie.TokenTrie`'s
    /// arrays as native-endian int32 bytes, and its aliases (node -> every id of its spelling).
    #[pyclass(name = "TrieTable", module = "gridrail._kernels", frozen)]
    struct PyTrieTable(walk::TrieTable);

    #[pymethods]
    impl PyTrieTable {
        #[new]
        fn new(
            edge: &[u8],
            depth: &[u8],
            size: &[u8],
            token_id: &[u8],
            aliases: HashMap<u32, Vec<u32>>,
        ) -> PyResult<Self> {
            walk::TrieTable::new(
                i32s(edge, "edge bytes")?,
                i32s(depth, "depths")?,
                i32s(size, "subtree sizes")?,
                i32s(token_id, "token ids")?,
                aliases,
            )
            .map(Self)
            .map_err(walk_error)
        }
    }

    /// `WalkScanner(table, words, live, top)`: the union scanner's `ScanTable` (its transitions
    /// are shared, not copied) and, per state, its live terminals and the top shadowing class of
    /// its accepting ones, as `words` native-endian uint64 words each.
    #[pyclass(name = "WalkScanner", module = "gridrail._kernels", frozen)]
    struct PyWalkScanner(walk::ScannerTable);

    /// A CD class as Python builds it: (node, scan state, lexeme length, accept state, tail).
    type CdTuple = (u32, i32, u32, i32, Py<PyBytes>);
    /// A walk as Python takes it: (ci_nodes, tokens, dense, cd_classes, kept classes).
    type WalkTuple = (Py<PyBytes>, Py<PyBytes>, bool, Vec<CdTuple>, PyCdClasses);

    /// `CdClasses`: a walk's CD classes as `cd_residue` reads them, kept beside their tuples
    /// so that a residue does not convert hundreds of tuples again at every call.
    #[pyclass(name = "CdClasses", module = "gridrail._kernels", frozen)]
    struct PyCdClasses(std::sync::Arc<[walk::CdClass]>);

    #[pymethods]
    impl PyCdClasses {
        fn __len__(&self) -> usize {
            self.0.len()
        }
    }

    /// The classes `cd_residue` takes: kept by a walk, or as tuples.
    #[derive(FromPyObject)]
    enum Classes<'py> {
        Kept(PyRef<'py, PyCdClasses>),
        Listed(Vec<(u32, i32, u32, i32, Vec<u8>)>),
    }

    #[pymethods]
    impl PyWalkScanner {
        #[new]
        fn new(table: &PyScanTable, words: usize, live: &[u8], top: &[u8]) -> PyResult<Self> {
            walk::ScannerTable::new(
                &table.0,
                words,
                ne_u64s(live, "live sets")?,
                ne_u64s(top, "accepting sets")?,
            )
            .map(Self)
            .map_err(walk_error)
        }

        /// `walk(trie, scan_state, lexeme_length, accept_state, tail, allowed, root, vocab_size,
        /// shared=None) -> (ci_nodes, tokens, dense, cd_classes)`: `walk_context_independent`
        /// then `ci_tokens` from a normalized scan part, `allowed` as uint64 words; `ci_nodes`
        /// as uint32 bytes, `tokens` as uint32 ids or (`dense`) bits; the walks below the
        /// nodes where a lexeme leaves the names taken from `shared` (the same walk). The GIL
        /// is released.
        #[allow(clippy::too_many_arguments)]
        #[pyo3(signature = (
            trie, scan_state, lexeme_length, accept_state, tail, allowed, root, vocab_size,
            shared=None
        ))]
        fn walk(
            &self,
            py: Python<'_>,
            trie: &PyTrieTable,
            scan_state: i32,
            lexeme_length: u32,
            accept_state: i32,
            tail: &[u8],
            allowed: &[u8],
            root: usize,
            vocab_size: usize,
            shared: Option<&PySharedWalks>,
        ) -> PyResult<WalkTuple> {
            let v = ne_u64s(allowed, "allowed set")?;
            let start = walk::Start {
                scan_state,
                lexeme_length,
                accept_state,
                tail,
            };
            let done = py
                .allow_threads(|| {
                    let splice = shared.map(|s| s.0.splice(&self.0, &trie.0, vocab_size));
                    walk::walk(
                        &self.0,
                        &trie.0,
                        &start,
                        &v,
                        root,
                        vocab_size,
                        splice.as_ref(),
                    )
                })
                .map_err(walk_error)?;
            let (tokens, dense) = match &done.tokens {
                walk::Tokens::Sparse(ids) => (ne_bytes(py, ids, u32::to_ne_bytes), false),
                walk::Tokens::Dense(bits) => (PyBytes::new(py, bits).unbind(), true),
            };
            let kept = PyCdClasses(done.cd_classes.as_slice().into());
            let classes = done
                .cd_classes
                .into_iter()
                .map(|cd| {
                    let tail = PyBytes::new(py, &cd.tail).unbind();
                    (
                        cd.node,
                        cd.scan_state,
                        cd.lexeme_length,
                        cd.accept_state,
                        tail,
                    )
                })
                .collect();
            Ok((
                ne_bytes(py, &done.ci_nodes, u32::to_ne_bytes),
                tokens,
                dense,
                classes,
                kept,
            ))
        }
    }

    /// `LrTable(action, goto, productions, end, words)`: `LalrTables`' rows (per state
    /// terminal -> move, nonterminal -> state), productions as (lhs, rhs length), the id of
    /// $END, and the words of a terminal set.
    #[pyclass(name = "LrTable", module = "gridrail._kernels", frozen)]
    struct PyLrTable(residue::LrTables);

    #[pymethods]
    impl PyLrTable {
        #[new]
        #[pyo3(signature = (action, goto, productions, end, words, bound=None))]
        fn new(
            action: Vec<HashMap<u32, i32>>,
            goto: Vec<HashMap<u32, u32>>,
            productions: Vec<(u32, u32)>,
            end: u32,
            words: usize,
            bound: Option<(Vec<u64>, u64)>,
        ) -> PyResult<Self> {
            let tables = residue::LrTables::new(action, goto, productions, end, words)
                .map_err(walk_error)?;
            match bound {
                Some((weights, near)) => tables.with_bound(weights, near),
                None => Ok(tables),
            }
            .map(Self)
            .map_err(walk_error)
        }
    }

    /// `cd_residue(memo, scanner, lr, trie, ignored, start_scan, stack, scan_state, lexeme_length,
    /// accept_state, tail, classes, vocab_size, ids_below) -> (tokens, dense) | None`: `_cd_residue`
    /// — the tokens of the CD `classes` (as `WalkScanner.walk` returns them) that the live
    /// configuration (its stack's states bottom to top, its pending lexeme) admits: as uint32
    /// ids, ascending, when fewer than `ids_below`, else (`dense`) as little-endian bits; None
    /// where a shift lands near the stack bound (the reference decides there). The GIL is
    /// released.
    /// `SharedWalks(base_states, capacity, max_bytes)`: the walks below a trie node from states
    /// numbered below `base_states` (a base scanner's, `below::SharedWalks`), shared by the
    /// `WalkMemo`s and `WalkScanner.walk` calls given it: one per base scanner, its terminal
    /// sets per state and trie.
    #[pyclass(name = "SharedWalks", module = "gridrail._kernels", frozen)]
    struct PySharedWalks(std::sync::Arc<below::SharedWalks>);

    #[pymethods]
    impl PySharedWalks {
        #[new]
        fn new(base_states: i32, capacity: usize, max_bytes: usize) -> Self {
            Self(std::sync::Arc::new(below::SharedWalks::new(
                base_states,
                capacity,
                max_bytes,
            )))
        }

        fn __len__(&self) -> usize {
            self.0.len()
        }

        /// `(lookups, misses)`: the walks asked of this store by every walk and memo sharing
        /// it, and how many of them were computed.
        fn counts(&self) -> (u64, u64) {
            self.0.counts()
        }
    }

    /// `WalkMemo(capacity, max_bytes, shared=None)`: the walks below CD nodes and the step
    /// facts that `cd_residue` keeps across calls (one per guide: each is a function of its key
    /// for one scanner, LR table and trie), at most `capacity` entries a table and `max_bytes`
    /// of walks; the walks from base states in `shared` when given.
    #[pyclass(name = "WalkMemo", module = "gridrail._kernels", frozen)]
    struct PyWalkMemo(std::sync::Mutex<residue::WalkMemo>);

    #[pymethods]
    impl PyWalkMemo {
        #[new]
        #[pyo3(signature = (capacity, max_bytes, shared=None))]
        fn new(capacity: usize, max_bytes: usize, shared: Option<&PySharedWalks>) -> Self {
            Self(std::sync::Mutex::new(residue::WalkMemo::sharing(
                capacity,
                max_bytes,
                shared.map(|s| s.0.clone()),
            )))
        }

        fn __len__(&self) -> usize {
            self.0.lock().map(|memo| memo.len()).unwrap_or(0)
        }

        /// `(lookups, misses)`: the walks below CD nodes asked for since the memo was made,
        /// and how many of them were computed (not found kept).
        fn counts(&self) -> (u64, u64) {
            self.0.lock().map(|memo| memo.counts()).unwrap_or((0, 0))
        }
    }

    #[pyfunction]
    #[allow(clippy::too_many_arguments)]
    fn cd_residue<'py>(
        py: Python<'py>,
        memo: &PyWalkMemo,
        scanner: &PyWalkScanner,
        lr: &PyLrTable,
        trie: &PyTrieTable,
        ignored: &[u8],
        start_scan: i32,
        stack: Vec<u32>,
        scan_state: i32,
        lexeme_length: u32,
        accept_state: i32,
        tail: &[u8],
        classes: Classes<'py>,
        vocab_size: usize,
        ids_below: usize,
    ) -> PyResult<Option<(Py<PyBytes>, bool)>> {
        let ignored = ne_u64s(ignored, "ignored set")?;
        if stack.is_empty()
            || ignored.len() != scanner.0.words()
            || lr.0.words() != scanner.0.words()
        {
            return Err(PyValueError::new_err(
                "an empty stack, or an ignored set or LR table of another width",
            ));
        }
        let classes: std::sync::Arc<[walk::CdClass]> = match classes {
            Classes::Kept(kept) => kept.0.clone(),
            Classes::Listed(listed) => listed
                .into_iter()
                .map(
                    |(node, scan_state, lexeme_length, accept_state, tail)| walk::CdClass {
                        node,
                        scan_state,
                        lexeme_length,
                        accept_state,
                        tail,
                    },
                )
                .collect(),
        };
        let states = scanner.0.num_states() as i64;
        let scan_ok = |q: i32| (-1..states).contains(&(q as i64));
        let outside = stack.iter().any(|&q| q as usize >= lr.0.num_states())
            || scan_state < 0
            || start_scan < 0
            || ![scan_state, start_scan, accept_state]
                .into_iter()
                .all(scan_ok)
            || classes.iter().any(|c| {
                c.node as usize >= trie.0.num_nodes()
                    || c.scan_state < 0
                    || !scan_ok(c.scan_state)
                    || !scan_ok(c.accept_state)
            });
        if outside {
            return Err(PyValueError::new_err("a state or node outside its table"));
        }
        let live = residue::Config {
            stack: stack.into(),
            scan_state,
            lexeme_length,
            accept_state,
            tail: tail.to_vec(),
        };
        let bits = py.allow_threads(|| {
            // a poisoned memo (a panic elsewhere) is only a cache: start it over
            let mut memo = memo.0.lock().unwrap_or_else(|poisoned| {
                let mut memo = poisoned.into_inner();
                *memo = memo.emptied();
                memo
            });
            residue::cd_residue(
                &scanner.0, &lr.0, &ignored, start_scan, &mut memo, &trie.0, &live, &classes,
                vocab_size,
            )
        });
        let bits = match bits {
            Err(walk::WalkError::NearStackBound) => return Ok(None),
            other => other.map_err(walk_error)?,
        };
        // `TokenSet.frozen`'s encoding: the ids when fewer than `ids_below`, else the bits
        let count: u32 = bits.iter().map(|b| b.count_ones()).sum();
        if (count as usize) >= ids_below {
            return Ok(Some((PyBytes::new(py, &bits).unbind(), true)));
        }
        // set bits a byte at a time: most bytes of a sparse set are zero
        let mut ids = Vec::with_capacity(count as usize);
        for (at, &byte) in bits.iter().enumerate().filter(|(_, &b)| b != 0) {
            let mut rest = byte;
            while rest != 0 {
                ids.push(at as u32 * 8 + rest.trailing_zeros());
                rest &= rest - 1;
            }
        }
        Ok(Some((ne_bytes(py, &ids, u32::to_ne_bytes), false)))
    }

    /// `SlotScanner(table, layout, slot_accept, slot_live, start, width, token_bytes,
    /// lengths)`: `SlotScan` with `TokenShapes` (python/gridrail/gamma/tokens.py) over the
    /// scanner `table` — per-state flags as `bytes` of 0/1, per token its first `width` bytes
    /// (zero-padded) and its length as native-endian uint32.
    #[pyclass(name = "SlotScanner", module = "gridrail._kernels", frozen)]
    struct PySlotScanner(slot_scan::SlotScanner);

    #[pymethods]
    impl PySlotScanner {
        #[new]
        #[allow(clippy::too_many_arguments)] // the reference's inputs, one each
        fn new(
            table: &PyScanTable,
            layout: &[u8],
            slot_accept: &[u8],
            slot_live: &[u8],
            start: i64,
            width: usize,
            token_bytes: &[u8],
            lengths: &[u8],
        ) -> PyResult<Self> {
            let lengths = ne_values(lengths, "lengths", "uint32", u32::from_ne_bytes)?;
            slot_scan::SlotScanner::new(
                &table.0,
                layout,
                slot_accept,
                slot_live,
                start,
                width,
                token_bytes.to_vec(),
                lengths,
            )
            .map(Self)
            .map_err(value_error)
        }

        /// `scan(ids, scan_state, may_cut_back) -> (marked, simple, closes, final_state,
        /// final_start)`: `SlotScan.scan` for `ids` (native-endian int64 bytes), bool arrays
        /// as bytes of 0/1 and the states and starts as native-endian int64. The GIL is
        /// released while it runs.
        #[allow(clippy::type_complexity)]
        fn scan(
            &self,
            py: Python<'_>,
            ids: &[u8],
            scan_state: i64,
            may_cut_back: bool,
        ) -> PyResult<(
            Py<PyBytes>,
            Py<PyBytes>,
            Py<PyBytes>,
            Py<PyBytes>,
            Py<PyBytes>,
        )> {
            let ids = ne_values(ids, "ids", "int64", i64::from_ne_bytes)?;
            let out = py
                .allow_threads(|| self.0.scan(&ids, scan_state, may_cut_back))
                .map_err(value_error)?;
            let flags = |v: &[bool]| ne_bytes(py, v, |b| [u8::from(b)]);
            Ok((
                flags(&out.marked),
                flags(&out.simple),
                flags(&out.closes),
                ne_bytes(py, &out.final_state, i64::to_ne_bytes),
                ne_bytes(py, &out.final_start, i64::to_ne_bytes),
            ))
        }
    }

    #[pymodule]
    fn _kernels(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<PyLrTable>()?;
        m.add_class::<PyWalkMemo>()?;
        m.add_class::<PySharedWalks>()?;
        m.add_class::<PyCdClasses>()?;
        m.add_function(wrap_pyfunction!(cd_residue, m)?)?;
        m.add_class::<PyScanTable>()?;
        m.add_class::<PySlotScanner>()?;
        m.add_class::<PyTrieTable>()?;
        m.add_class::<PyWalkScanner>()?;
        m.add_function(wrap_pyfunction!(name_rows, m)?)?;
        m.add_class::<PyNameAutomaton>()?;
        m.add_function(wrap_pyfunction!(literal_alternation, m)?)?;
        m.add_function(wrap_pyfunction!(canonical_json, m)?)?;
        m.add_function(wrap_pyfunction!(distinct_spellings, m)?)?;
        m.add_function(wrap_pyfunction!(union_scanner, m)?)?;
        m.add_function(wrap_pyfunction!(lalr_tables, m)?)?;
        m.add_function(wrap_pyfunction!(spell_forms, m)?)?;
        m.add_function(wrap_pyfunction!(write_mask_row, m)?)?;
        Ok(())
    }
}
