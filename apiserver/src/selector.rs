//! Label and field selectors, parsed and matched as apimachinery does
//! (pkg/labels/selector.go `Parse`, pkg/fields/selector.go `ParseSelector`): the same grammar,
//! the same accepted oddities (`x in (a,,b)`, `k=` meaning an empty value) and the same error
//! texts, since a proxier that sends a selector we misread would program the wrong Services.

mod field;
mod label;

pub(crate) use field::FieldSelector;
pub(crate) use label::LabelSelector;
