//! DynamoDB item size and write cost, by the service's published sizing rules.
//!
//! Sizes decide two things: whether an item may be written at all (400 KB) and
//! how many write capacity units it costs (`ceil(size / 1 KB)`). Both must match
//! DynamoDB closely, because the writer paces itself in WCU and the limits proxy
//! charges the same way.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// A DynamoDB item, exactly as the SDK sends it.
pub type Item = HashMap<String, AttributeValue>;

/// Largest item DynamoDB stores: 400 KB, counting attribute names.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// Largest BatchWriteItem request body DynamoDB accepts.
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// Most put/delete requests in one BatchWriteItem.
pub const MAX_BATCH_ITEMS: usize = 25;

/// Deepest level of an attribute value DynamoDB stores: a top-level
/// attribute is level 1 and each enclosing map or list adds one, so at most
/// 31 containers nest (a 32nd is a ValidationException).
pub const MAX_NESTING_LEVELS: usize = 32;

/// One WCU writes up to this many bytes of one item per second.
pub(crate) const WCU_BYTES: usize = 1024;

/// Size of an item in bytes: attribute names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

/// Write capacity units one write of an item of `size` bytes costs (at least 1).
pub fn wcu_for_size(size: usize) -> u64 {
    size.div_ceil(WCU_BYTES).max(1) as u64
}

/// Write capacity units one write of `item` costs.
pub fn item_wcu(item: &Item) -> u64 {
    wcu_for_size(item_size(item))
}

/// Size of one attribute value.
///
/// Containers (M, L) cost 3 bytes plus 1 byte per element on top of their
/// contents; null and boolean cost 1 byte; numbers about one byte per two
/// significant digits plus one.
pub(crate) fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        // A variant added by a future SDK: count it as its debug form so the
        // size errs on the large side rather than under-charging.
        other => format!("{other:?}").len(),
    }
}

/// Size of a number in DynamoDB's variable-width encoding: significant digits
/// (leading and trailing zeros trimmed) packed two per byte, plus one byte.
pub fn number_size(n: &str) -> usize {
    let mantissa = n
        .trim_start_matches(['-', '+'])
        .split(['e', 'E'])
        .next()
        .unwrap_or_default();
    // Counted in place (no String of the digits): this runs for every number
    // of every record.
    let (mut count, mut first, mut last) = (0_usize, None, 0_usize);
    for b in mantissa.bytes().filter(u8::is_ascii_digit) {
        if b != b'0' {
            first.get_or_insert(count);
            last = count;
        }
        count += 1;
    }
    size_of_significant(first.map_or(0, |first| last - first + 1))
}

/// [`number_size`] of an integer.
pub fn int_number_size(n: i64) -> usize {
    int_text_size(itoa::Buffer::new().format(n))
}

/// [`number_size`] of an integer's decimal text as `itoa` or `to_string`
/// writes it (no leading zeros, no exponent): its digits less the trailing
/// zeros.
pub(crate) fn int_text_size(text: &str) -> usize {
    size_of_significant(text.trim_start_matches('-').trim_end_matches('0').len())
}

/// A number's size from its count of significant digits.
pub(crate) fn size_of_significant(significant: usize) -> usize {
    significant.max(1).div_ceil(2) + 1
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The first implementation of [`number_size`], which collected the
    /// digits into a String: the oracle for the one that counts in place.
    fn number_size_by_string(n: &str) -> usize {
        let mantissa = n
            .trim_start_matches(['-', '+'])
            .split(['e', 'E'])
            .next()
            .unwrap_or_default();
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
        significant.max(1).div_ceil(2) + 1
    }

    proptest! {
        #[test]
        fn number_size_counts_like_the_string_version(
            n in "[-+]?[0-9]{0,45}(\\.[0-9]{0,45})?([eE][-+]?[0-9]{1,4})?",
            junk in "\\PC{0,8}",
        ) {
            prop_assert_eq!(number_size(&n), number_size_by_string(&n));
            let odd = format!("{n}{junk}");
            prop_assert_eq!(number_size(&odd), number_size_by_string(&odd));
        }

        #[test]
        fn int_number_size_is_number_size_of_the_text(n in any::<i64>(), zeros in 0u32..12) {
            prop_assert_eq!(int_number_size(n), number_size(&n.to_string()));
            let round = n.checked_div(10_i64.pow(zeros)).and_then(|q| q.checked_mul(10_i64.pow(zeros)));
            if let Some(r) = round {
                prop_assert_eq!(int_number_size(r), number_size(&r.to_string()));
            }
        }
    }

    #[test]
    fn int_number_size_edges() {
        for n in [0, 1, -1, 10, 100, 1_700_000_000_000, i64::MAX, i64::MIN] {
            assert_eq!(int_number_size(n), number_size(&n.to_string()), "{n}");
        }
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn strings_count_name_and_utf8_bytes() {
        let it = item(&[("pk", AttributeValue::S("héllo".into()))]);
        assert_eq!(item_size(&it), 2 + 6);
    }

    #[test]
    fn numbers_pack_two_digits_per_byte() {
        assert_eq!(number_size("0"), 2);
        assert_eq!(number_size("7"), 2);
        assert_eq!(number_size("12"), 2);
        assert_eq!(number_size("123"), 3);
        assert_eq!(number_size("-123.4500"), 4);
        assert_eq!(number_size("1700000000000"), 2);
        assert_eq!(number_size("1763790000123"), 8);
        assert_eq!(number_size("1.5e10"), 2);
    }

    #[test]
    fn containers_add_overhead_per_element() {
        let l = AttributeValue::L(vec![AttributeValue::Bool(true), AttributeValue::Null(true)]);
        assert_eq!(value_size(&l), 3 + 2 + 2);
        let m = AttributeValue::M(item(&[("a", AttributeValue::S("xy".into()))]));
        assert_eq!(value_size(&m), 3 + 1 + 1 + 2);
    }

    #[test]
    fn wcu_rounds_up_per_kilobyte() {
        assert_eq!(wcu_for_size(0), 1);
        assert_eq!(wcu_for_size(1024), 1);
        assert_eq!(wcu_for_size(1025), 2);
        assert_eq!(wcu_for_size(MAX_ITEM_BYTES), 400);
    }
}
