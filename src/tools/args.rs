//! Reading tool arguments. A wrong argument is a tool error (`invalid_input`) rather than a
//! protocol error, so the assistant sees the message and can correct itself.

use serde_json::{Map, Value};

use super::ToolError;

pub type Args = Map<String, Value>;

/// A string argument; `None` when absent (or null).
pub fn opt_str(args: &Args, name: &str) -> Result<Option<String>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ToolError::InvalidInput(format!(
            "`{name}` must be a string"
        ))),
    }
}

pub fn req_str(args: &Args, name: &str) -> Result<String, ToolError> {
    opt_str(args, name)?.ok_or_else(|| ToolError::InvalidInput(format!("`{name}` is required")))
}

/// An integer argument within `min..=max`; `None` when absent.
pub fn opt_int(args: &Args, name: &str, min: i64, max: i64) -> Result<Option<i64>, ToolError> {
    let out_of_range =
        || ToolError::InvalidInput(format!("`{name}` must be an integer from {min} to {max}"));
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            let v = n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                        .map(|f| f as i64)
                })
                .ok_or_else(out_of_range)?;
            if (min..=max).contains(&v) {
                Ok(Some(v))
            } else {
                Err(out_of_range())
            }
        }
        Some(_) => Err(out_of_range()),
    }
}

pub fn opt_bool(args: &Args, name: &str) -> Result<Option<bool>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ToolError::InvalidInput(format!(
            "`{name}` must be true or false"
        ))),
    }
}

/// Sets a field of a JSON object built by the tools (no-op on anything else, never a panic).
pub fn set(object: &mut Value, name: &str, value: Value) {
    if let Some(fields) = object.as_object_mut() {
        fields.insert(name.to_owned(), value);
    }
}
