//! params.rs - how a Rust type maps to a parameter of the C ABI: the
//! traits #[derive(Params)] builds the parameter table with.
use crate::sys;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// A type whose fields are a tool's parameters: `#[derive(Params)]`.
pub trait Params {
    /// The parameter table (static data of the plugin).
    const PARAMS: &'static [sys::toolhost_param];
}

/// The JSON type of a field: `TYPE` (a toolhost_type), the type of an
/// array's items, whether the parameter may be left out (Option).
/// Implement it for a type of your own that deserializes from an object
/// (TYPE = OBJECT), or use `#[param(json_type = "object")]`.
pub trait ParamType {
    const TYPE: u32;
    const ITEM_TYPE: u32 = 0;
    const OPTIONAL: bool = false;
}

macro_rules! param_type {
    ($c:ident: $($t:ty),*) => {$(
        impl ParamType for $t {
            const TYPE: u32 = sys::$c;
        }
    )*};
}

param_type!(toolhost_type_TOOLHOST_TYPE_STRING: String, Box<str>, char);
param_type!(toolhost_type_TOOLHOST_TYPE_INTEGER: i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);
param_type!(toolhost_type_TOOLHOST_TYPE_NUMBER: f32, f64);
param_type!(toolhost_type_TOOLHOST_TYPE_BOOLEAN: bool);
param_type!(toolhost_type_TOOLHOST_TYPE_OBJECT: serde_json::Map<String, serde_json::Value>, serde_json::Value);

impl<'a> ParamType for Cow<'a, str> {
    const TYPE: u32 = sys::toolhost_type_TOOLHOST_TYPE_STRING;
}

impl<T: ParamType> ParamType for Vec<T> {
    const TYPE: u32 = sys::toolhost_type_TOOLHOST_TYPE_ARRAY;
    const ITEM_TYPE: u32 = T::TYPE;
}

impl<T: ParamType> ParamType for Option<T> {
    const TYPE: u32 = T::TYPE;
    const ITEM_TYPE: u32 = T::ITEM_TYPE;
    const OPTIONAL: bool = true;
}

impl<V, S> ParamType for HashMap<String, V, S> {
    const TYPE: u32 = sys::toolhost_type_TOOLHOST_TYPE_OBJECT;
}

impl<V> ParamType for BTreeMap<String, V> {
    const TYPE: u32 = sys::toolhost_type_TOOLHOST_TYPE_OBJECT;
}
