//! Where a mask's row goes in a caller's int32 bitmask: the checks of
//! `gridrail.guide.Matcher.fill_bitmask` and `gridrail.mask.bitmask.TokenSet.write_row` on a
//! buffer's layout, so the binding (`write_mask_row`) copies a row in one foreign call.

/// Whether a buffer's struct-module `format` is a native little-endian 4-byte signed integer
/// (NumPy's int32 exports "i"); callers check the item size. A big-endian ">i4" array is not.
pub fn is_little_int32(format: &[u8]) -> bool {
    let code = match format {
        [b'@' | b'=' | b'<', rest @ ..] => rest,
        _ => format,
    };
    cfg!(target_endian = "little") && matches!(code, b"i" | b"l")
}

/// The byte offset of row `row` (negative: from the end, as Python indexes) of a 2-D buffer of
/// `itemsize`-byte items, `shape` and `strides` (bytes), when each of its rows is `row_bytes`
/// contiguous bytes of 4-byte items and `row` is inside it; None otherwise (the Python path then
/// converts the array or raises).
pub fn row_offset(
    shape: &[usize],
    strides: &[isize],
    itemsize: usize,
    row: i64,
    row_bytes: usize,
) -> Option<isize> {
    if shape.len() != 2 || strides.len() != 2 || itemsize != 4 || strides[1] != 4 {
        return None;
    }
    if shape[1].checked_mul(4)? != row_bytes {
        return None;
    }
    let rows = i64::try_from(shape[0]).ok()?;
    let index = if row < 0 { row + rows } else { row };
    if !(0..rows).contains(&index) {
        return None;
    }
    isize::try_from(index).ok()?.checked_mul(strides[0])
}

#[cfg(test)]
mod tests {
    use super::{is_little_int32, row_offset};

    #[test]
    fn int32_formats() {
        for format in [&b"i"[..], b"<i", b"=i", b"@i"] {
            assert!(is_little_int32(format), "{format:?}");
        }
        for format in [&b">i"[..], b"!i", b"I", b"q", b"f", b"ii", b""] {
            assert!(!is_little_int32(format), "{format:?}");
        }
    }

    #[test]
    fn rows_of_a_c_contiguous_bitmask() {
        let (shape, strides) = ([3, 5], [20, 4]);
        assert_eq!(row_offset(&shape, &strides, 4, 0, 20), Some(0));
        assert_eq!(row_offset(&shape, &strides, 4, 2, 20), Some(40));
        assert_eq!(row_offset(&shape, &strides, 4, -1, 20), Some(40));
        assert_eq!(row_offset(&shape, &strides, 4, -3, 20), Some(0));
    }

    #[test]
    fn a_view_of_every_other_row_steps_by_its_stride() {
        assert_eq!(row_offset(&[2, 5], &[40, 4], 4, 1, 20), Some(40));
    }

    #[test]
    fn anything_else_is_left_to_python() {
        let (shape, strides) = ([3, 5], [20, 4]);
        assert_eq!(row_offset(&shape, &strides, 4, 3, 20), None); // past the end
        assert_eq!(row_offset(&shape, &strides, 4, -4, 20), None);
        assert_eq!(row_offset(&shape, &strides, 4, 0, 24), None); // another vocabulary's width
        assert_eq!(row_offset(&shape, &strides, 8, 0, 20), None); // int64 items
        assert_eq!(row_offset(&[15], &[4], 4, 0, 20), None); // one dimension
        assert_eq!(row_offset(&[5, 3], &[4, 20], 4, 0, 20), None); // a transposed array
    }
}
