//! `Input Dims` and `Input type` of CPU ops and annotations, summarised
//! while streaming (no allocation per event).
//!
//! In: the JSON arrays PyTorch writes with `record_shapes=True`, e.g.
//! `"Input Dims": [[], [[256]], [], ...]` (a tensor list in argument 1) and
//! `"Input type": ["", "TensorList", "", ...]`. Out: [`InputDims`], the
//! index and element count of the first argument with a shape (a tensor:
//! the product of its dims; a tensor list: the sum over its tensors), and
//! [`InputTypes`], the element type of the first few arguments.

use std::fmt;

use rankscope_proto::v1::DataType as Dt;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::nccl::dtype_from_c10;

/// Arguments whose types are kept.
const TYPED_ARGS: usize = 8;

/// The first argument with a shape: (argument index, elements).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InputDims(pub Option<(usize, u64)>);

/// Element type and size of the first [`TYPED_ARGS`] arguments (`None`:
/// not a tensor, a tensor list, or a type we do not know).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InputTypes(pub [Option<(Dt, u64)>; TYPED_ARGS]);

impl InputTypes {
    pub(crate) fn get(&self, i: usize) -> Option<(Dt, u64)> {
        self.0.get(i).copied().flatten()
    }
}

/// One value inside `Input Dims`.
enum Node {
    Dim(u64),
    /// A list: its element count (`None`: empty or no shape in it).
    List(Option<u64>),
    Other,
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a shape")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Dim(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(u64::try_from(v).map_or(Node::Other, Node::Dim))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Node::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        // All dims: a tensor (product); lists: a tensor list (sum).
        let (mut product, mut dims) = (1u64, 0usize);
        let mut sum: Option<u64> = None;
        while let Some(n) = seq.next_element::<Node>()? {
            match n {
                Node::Dim(d) => {
                    product = product.saturating_mul(d);
                    dims += 1;
                }
                Node::List(Some(e)) => sum = Some(sum.unwrap_or(0).saturating_add(e)),
                Node::List(None) | Node::Other => {}
            }
        }
        Ok(Node::List(sum.or((dims > 0).then_some(product))))
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

impl<'de> Deserialize<'de> for InputDims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InputDims;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of shapes")
            }
            ignore_other_types!();
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputDims, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(InputDims::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<InputDims, A::Error> {
                let mut first = None;
                let mut i = 0;
                while let Some(n) = seq.next_element::<Node>()? {
                    if let (None, Node::List(Some(e))) = (first, n) {
                        first = Some((i, e));
                    }
                    i += 1;
                }
                Ok(InputDims(first))
            }
        }
        d.deserialize_any(V)
    }
}

/// One element of `Input type`.
struct TypeName(Option<(Dt, u64)>);

impl<'de> Deserialize<'de> for TypeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TypeName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a type name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TypeName, E> {
                Ok(TypeName(dtype_from_c10(v)))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TypeName, E> {
                Ok(TypeName(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TypeName, E> {
                Ok(TypeName(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TypeName, E> {
                Ok(TypeName(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TypeName, E> {
                Ok(TypeName(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<TypeName, E> {
                Ok(TypeName(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TypeName, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TypeName(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TypeName, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(TypeName(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for InputTypes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InputTypes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of type names")
            }
            ignore_other_types!();
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputTypes, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(InputTypes::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<InputTypes, A::Error> {
                let mut out = InputTypes::default();
                let mut i = 0;
                while let Some(t) = seq.next_element::<TypeName>()? {
                    if let Some(slot) = out.0.get_mut(i) {
                        *slot = t.0;
                    }
                    i += 1;
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(json: &str) -> InputDims {
        serde_json::from_str(json).expect("parse")
    }

    #[test]
    fn first_shaped_argument_and_its_elements() {
        assert_eq!(dims("[[[1024]], [], [], []]"), InputDims(Some((0, 1024))));
        assert_eq!(dims("[[], [[256]], [], []]"), InputDims(Some((1, 256))));
        assert_eq!(dims("[[2, 256], []]"), InputDims(Some((0, 512))));
        assert_eq!(dims("[[[4], [6]], []]"), InputDims(Some((0, 10))));
        assert_eq!(dims("[[[[3], [3]]]]"), InputDims(Some((0, 6))));
        assert_eq!(dims("[[], []]"), InputDims(None));
        assert_eq!(dims("\"odd\""), InputDims(None));
    }

    #[test]
    fn types_by_argument() {
        let t: InputTypes =
            serde_json::from_str(r#"["TensorList", "float", "long int", 3, "unsigned char"]"#)
                .expect("parse");
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(1), Some((Dt::Float32, 4)));
        assert_eq!(t.get(2), Some((Dt::Int64, 8)));
        assert_eq!(t.get(3), None);
        assert_eq!(t.get(4), Some((Dt::Uint8, 1)));
        assert_eq!(t.get(99), None);
    }
}

/// `Input Dims` as Python prints the parsed list (`str(args["Input Dims"])`,
/// the TensorBoard plugin 0.4.3's "Operator + Input Shape" group key,
/// `op_agg.py`): `[[3, 4], [], [5]]` — from the JSON bytes of the value
/// (the flat reader's path). Whitespace is dropped, `,` becomes `, `,
/// strings take single quotes and `true` / `false` / `null` Python's
/// names; the bytes have no escapes (the flat reader leaves those to serde).
pub(crate) fn shape_text(b: &[u8], out: &mut String) {
    out.clear();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b',' => out.push_str(", "),
            b'"' => {
                let end = b[i + 1..]
                    .iter()
                    .position(|&c| c == b'"')
                    .map_or(b.len(), |p| i + 1 + p);
                out.push('\'');
                out.push_str(std::str::from_utf8(&b[i + 1..end]).unwrap_or(""));
                out.push('\'');
                i = end;
            }
            b't' if b[i..].starts_with(b"true") => {
                out.push_str("True");
                i += 3;
            }
            b'f' if b[i..].starts_with(b"false") => {
                out.push_str("False");
                i += 4;
            }
            b'n' if b[i..].starts_with(b"null") => {
                out.push_str("None");
                i += 3;
            }
            c => out.push(c as char),
        }
        i += 1;
    }
}

/// [`shape_text`] of a parsed value (serde's path).
pub(crate) fn shape_text_of(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value as V;
    match v {
        V::Array(a) => {
            out.push('[');
            for (k, x) in a.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                shape_text_of(x, out);
            }
            out.push(']');
        }
        V::String(s) => {
            out.push('\'');
            out.push_str(s);
            out.push('\'');
        }
        V::Bool(true) => out.push_str("True"),
        V::Bool(false) => out.push_str("False"),
        V::Null => out.push_str("None"),
        V::Number(n) => out.push_str(&n.to_string()),
        V::Object(_) => out.push_str(&v.to_string()),
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn shape_text_prints_the_list_as_python_does_on_both_paths() {
        for (json, want) in [
            ("[[3,4], [], [[5], [6, 7]]]", "[[3, 4], [], [[5], [6, 7]]]"),
            ("[ [ 2 ,3 ] ,\n [] ]", "[[2, 3], []]"),
            ("[]", "[]"),
            ("[[1], \"x y\", null, true]", "[[1], 'x y', None, True]"),
        ] {
            let mut a = String::new();
            shape_text(json.as_bytes(), &mut a);
            assert_eq!(a, want);
            let mut b = String::new();
            shape_text_of(&serde_json::from_str(json).unwrap(), &mut b);
            assert_eq!(b, want);
        }
    }
}
