//! Decoding a message map tagged with `type` in one pass.
//!
//! serde decodes an enum tagged inside its map (`#[serde(tag = "type")]`)
//! in two passes: it first copies the whole map into a buffer of its own
//! (the tag may come last), then decodes the variant from that buffer.
//! That buffer costs far more than the frame: about 32 bytes per value, so
//! a 1 MiB frame of small numbers briefly took 48 MiB, and a 16 MiB frame
//! after the welcome most of a GiB. The codec has the whole payload, so it
//! reads the `type` first (a scan that keeps nothing else) and then
//! decodes the variant straight from the payload, ignoring the `type` key
//! as it goes by.
//!
//! [`tagged_messages!`] declares a direction's enum once: the enum itself
//! (serialized tagged, as the protocol says) and a private mirror that
//! serde derives as an enum whose variant is given apart from its fields,
//! which is what [`Tagged`] gives it.

use serde::de::{
    DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, VariantAccess, Visitor,
};
use serde::Deserialize;

/// A message's fields (`body`, the whole map) presented as the variant
/// named `kind`.
pub struct Tagged<'a, D> {
    pub kind: &'a str,
    pub body: D,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Tagged<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, D: Deserializer<'de>> EnumAccess<'de> for Tagged<'_, D> {
    type Error = D::Error;
    type Variant = Self;

    fn variant_seed<S>(self, seed: S) -> Result<(S::Value, Self), D::Error>
    where
        S: DeserializeSeed<'de>,
    {
        let variant = seed.deserialize(self.kind.into_deserializer())?;
        Ok((variant, self))
    }
}

impl<'de, D: Deserializer<'de>> VariantAccess<'de> for Tagged<'_, D> {
    type Error = D::Error;

    /// A message without fields still is a map: it is read past.
    fn unit_variant(self) -> Result<(), D::Error> {
        IgnoredAny::deserialize(self.body).map(drop)
    }

    fn newtype_variant_seed<S>(self, seed: S) -> Result<S::Value, D::Error>
    where
        S: DeserializeSeed<'de>,
    {
        seed.deserialize(self.body)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        self.body.deserialize_tuple(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.body.deserialize_struct("message", fields, visitor)
    }
}

/// Declares a direction's message enum (see the module doc): `$name` with
/// `#[serde(tag = "type", rename_all = "snake_case")]`, and `$mirror`,
/// through which `$name::deserialize_tagged` decodes it in one pass.
/// `$remote` is `$name` as a string (serde wants a literal).
macro_rules! tagged_messages {
    (
        $(#[$attr:meta])*
        pub enum $name:ident ($remote:literal, mirror $mirror:ident) {
            $(
                $(#[$vattr:meta])*
                $variant:ident
                $( ( $inner:ty ) )?
                $( { $( $(#[$fattr:meta])* $field:ident : $fty:ty ),* $(,)? } )?
            ),* $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Serialize, Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        pub enum $name {
            $(
                $(#[$vattr])*
                $variant
                $( ( $inner ) )?
                $( { $( $(#[$fattr])* $field : $fty ),* } )?
            ),*
        }

        /// `$name` as serde derives an enum whose variant comes apart
        /// from its fields; never built, only its `deserialize` is used.
        #[derive(Deserialize)]
        #[serde(remote = $remote, rename_all = "snake_case")]
        #[allow(dead_code)]
        enum $mirror {
            $(
                $(#[$vattr])*
                $variant
                $( ( $inner ) )?
                $( { $( $(#[$fattr])* $field : $fty ),* } )?
            ),*
        }

        impl $name {
            /// Decodes the message whose `type` is `kind` from `body`,
            /// the whole map, in one pass.
            pub fn deserialize_tagged<'de, D: serde::Deserializer<'de>>(
                kind: &str,
                body: D,
            ) -> Result<Self, D::Error> {
                $mirror::deserialize($crate::protocol::tagged::Tagged { kind, body })
            }
        }
    };
}

pub(crate) use tagged_messages;
