use super::*;

#[test]
fn age_values_are_the_decimal_seconds() {
    for age in [0u64, 1, 9, 10, 11, 42, 99, 100, 12345] {
        assert_eq!(&age_value(age)[..], age.to_string().as_bytes(), "{age}");
    }
}
