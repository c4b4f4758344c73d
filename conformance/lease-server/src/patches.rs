//! Patch documents applied to a Lease's JSON: JSON merge patch (RFC 7386),
//! JSON patch (RFC 6902), and strategic merge patch as it works on the
//! Lease schema.

use serde_json::{json, Map, Value};

/// RFC 7386: objects merge field by field, a null removes a field,
/// anything else replaces what is there.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// A strategic merge patch on a Lease (k8s.io/apimachinery/pkg/util/
/// strategicpatch/patch.go, with the Lease's schema): a merge patch, plus
/// the `$patch: replace` and `$patch: delete` directives on objects,
/// `metadata.finalizers` merged as a set (`patchStrategy:"merge"`) with
/// `$deleteFromPrimitiveList/finalizers`, and `metadata.ownerReferences`
/// merged by `uid` (`patchMergeKey:"uid"`), an item with `$patch: delete`
/// removing the one with its uid. Every other list replaces the one there.
/// `$setElementOrder/` and `$retainKeys` are accepted and ignored.
pub(crate) fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    if strategic(target, patch, &[])? {
        *target = json!({});
    }
    Ok(())
}

/// Patches `target` at `path` with the object `patch`; true if the
/// directive `$patch: delete` removes it.
fn strategic(target: &mut Value, patch: &Value, path: &[&str]) -> Result<bool, String> {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return Ok(false);
    };
    match patch.get("$patch").map(|d| d.as_str()) {
        None => {}
        Some(Some("delete")) => return Ok(true),
        Some(Some("replace")) => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return Ok(false);
        }
        Some(other) => return Err(format!("Unknown patch type: {}", json!(other))),
    }
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if key.starts_with("$setElementOrder/") || key == "$retainKeys" {
            continue;
        }
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let gone = value.as_array().cloned().unwrap_or_default();
            if let Some(items) = target.get_mut(list).and_then(Value::as_array_mut) {
                items.retain(|item| !gone.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(format!("unknown directive {key:?}"));
        }
        let here: Vec<&str> = path.iter().copied().chain([key.as_str()]).collect();
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(_) => {
                let slot = target.entry(key.clone()).or_insert(Value::Null);
                if strategic(slot, value, &here)? {
                    target.remove(key);
                }
            }
            Value::Array(items) => {
                let slot = target.entry(key.clone()).or_insert_with(|| json!([]));
                match here.as_slice() {
                    ["metadata", "finalizers"] => merge_set(slot, items),
                    ["metadata", "ownerReferences"] => merge_by_uid(slot, items),
                    _ => *slot = value.clone(),
                }
            }
            _ => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(false)
}

/// A list merged as a set of scalars: new items appended.
fn merge_set(list: &mut Value, items: &[Value]) {
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("an array");
    for item in items {
        if !list.contains(item) {
            list.push(item.clone());
        }
    }
}

/// A list of objects merged by their `uid`.
fn merge_by_uid(list: &mut Value, items: &[Value]) {
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("an array");
    for item in items {
        let uid = &item["uid"];
        let at = list.iter().position(|old| old["uid"] == *uid);
        let delete = item["$patch"] == "delete";
        match (at, delete) {
            (Some(at), true) => {
                list.remove(at);
            }
            (None, true) => {}
            (Some(at), false) => merge_patch(&mut list[at], item),
            (None, false) => list.push(item.clone()),
        }
    }
}

/// Why a JSON patch did not apply.
pub(crate) type PatchError = String;

/// RFC 6901: the reference tokens of a JSON pointer.
fn pointer(text: &str) -> Result<Vec<String>, PatchError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer {text:?}"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// An array index token: digits, no leading zero.
fn index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    (digits && (token == "0" || !token.starts_with('0')))
        .then(|| token.parse().ok())
        .flatten()
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |node, token| match node {
        Value::Object(map) => map.get(token),
        Value::Array(items) => index(token).and_then(|i| items.get(i)),
        _ => None,
    })
}

fn get_mut<'a>(doc: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(doc, |node, token| match node {
        Value::Object(map) => map.get_mut(token),
        Value::Array(items) => index(token).and_then(|i| items.get_mut(i)),
        _ => None,
    })
}

fn missing(op: &str, path: &[String]) -> PatchError {
    format!(
        "{op} operation does not apply: doc is missing path: /{}",
        path.join("/")
    )
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), PatchError> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent) {
        Some(Value::Object(map)) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let at = if last == "-" {
                Some(items.len())
            } else {
                index(last)
            };
            match at.filter(|at| *at <= items.len()) {
                Some(at) => {
                    items.insert(at, value);
                    Ok(())
                }
                None => Err(format!(
                    "add operation does not apply: index {last:?} out of bounds"
                )),
            }
        }
        _ => Err(missing("add", path)),
    }
}

fn remove(doc: &mut Value, path: &[String], op: &str) -> Result<Value, PatchError> {
    let Some((last, parent)) = path.split_last() else {
        return Err(format!("{op} operation does not apply: the whole document"));
    };
    let removed = match get_mut(doc, parent) {
        Some(Value::Object(map)) => map.remove(last),
        Some(Value::Array(items)) => index(last)
            .filter(|i| *i < items.len())
            .map(|i| items.remove(i)),
        _ => None,
    };
    removed.ok_or_else(|| missing(op, path))
}

/// One RFC 6902 operation.
fn operation(doc: &mut Value, op: &Map<String, Value>) -> Result<(), PatchError> {
    let field = |name: &str| -> Result<Vec<String>, PatchError> {
        let text = op
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("operation missing {name:?}"))?;
        pointer(text)
    };
    let value = || {
        op.get("value")
            .cloned()
            .ok_or("operation missing \"value\"")
    };
    let path = field("path")?;
    match op.get("op").and_then(Value::as_str).unwrap_or_default() {
        "add" => add(doc, &path, value()?),
        "remove" => remove(doc, &path, "remove").map(drop),
        "replace" => {
            let value = value()?;
            match get_mut(doc, &path) {
                Some(slot) => {
                    *slot = value;
                    Ok(())
                }
                None => Err(missing("replace", &path)),
            }
        }
        "move" => {
            let from = field("from")?;
            if path.len() > from.len() && path.starts_with(&from) {
                return Err("move operation does not apply: from is a parent of path".into());
            }
            let moved = remove(doc, &from, "move")?;
            add(doc, &path, moved)
        }
        "copy" => {
            let from = field("from")?;
            let copied = get(doc, &from)
                .cloned()
                .ok_or_else(|| missing("copy", &from))?;
            add(doc, &path, copied)
        }
        "test" => {
            let expected = value()?;
            match get(doc, &path) {
                Some(actual) if *actual == expected => Ok(()),
                _ => Err(format!(
                    "testing value /{} failed: test failed",
                    path.join("/")
                )),
            }
        }
        other => Err(format!("Unexpected kind: {other}")),
    }
}

/// RFC 6902: every operation in order, or none (the document is left as
/// it was if one fails).
pub(crate) fn json_patch(doc: &mut Value, ops: &[Value]) -> Result<(), PatchError> {
    let mut patched = doc.clone();
    for op in ops {
        let op = op.as_object().ok_or("an operation is not an object")?;
        operation(&mut patched, op)?;
    }
    *doc = patched;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386_examples() {
        let mut doc = json!({ "a": "b", "c": { "d": "e", "f": "g" } });
        merge_patch(&mut doc, &json!({ "a": "z", "c": { "f": null } }));
        assert_eq!(doc, json!({ "a": "z", "c": { "d": "e" } }));
    }

    #[test]
    fn json_patch_follows_rfc_6902_and_is_all_or_nothing() {
        let mut doc = json!({ "a": { "b": [1, 2] } });
        let ops = json!([
            { "op": "add", "path": "/a/b/-", "value": 3 },
            { "op": "move", "from": "/a/b", "path": "/c" },
            { "op": "copy", "from": "/c/0", "path": "/d" },
            { "op": "test", "path": "/d", "value": 1 },
            { "op": "replace", "path": "/a", "value": "x" },
            { "op": "remove", "path": "/c/1" },
        ]);
        json_patch(&mut doc, ops.as_array().unwrap()).unwrap();
        assert_eq!(doc, json!({ "a": "x", "c": [1, 3], "d": 1 }));
        let failing = json!([
            { "op": "remove", "path": "/d" },
            { "op": "test", "path": "/a", "value": "y" },
        ]);
        assert!(json_patch(&mut doc, failing.as_array().unwrap()).is_err());
        assert_eq!(doc["d"], 1, "a failed patch changed the document");
        let missing = json!([{ "op": "replace", "path": "/nope/x", "value": 1 }]);
        assert!(json_patch(&mut doc, missing.as_array().unwrap()).is_err());
    }

    #[test]
    fn strategic_merge_patch_directives_and_merge_keys() {
        let mut doc = json!({
            "metadata": {
                "labels": { "a": "1", "b": "2" },
                "finalizers": ["x"],
                "ownerReferences": [{ "uid": "u1", "name": "one" }, { "uid": "u2", "name": "two" }],
            },
            "spec": { "holderIdentity": "h" },
        });
        let patch = json!({
            "metadata": {
                "labels": { "$patch": "replace", "c": "3" },
                "finalizers": ["y"],
                "ownerReferences": [{ "uid": "u1", "$patch": "delete" }, { "uid": "u3", "name": "three" }],
            },
            "spec": { "$patch": "delete" },
        });
        strategic_merge_patch(&mut doc, &patch).unwrap();
        assert_eq!(doc["metadata"]["labels"], json!({ "c": "3" }));
        assert_eq!(doc["metadata"]["finalizers"], json!(["x", "y"]));
        assert_eq!(
            doc["metadata"]["ownerReferences"],
            json!([{ "uid": "u2", "name": "two" }, { "uid": "u3", "name": "three" }])
        );
        assert!(doc.get("spec").is_none());
        let bad = json!({ "spec": { "$patch": "explode" } });
        assert!(strategic_merge_patch(&mut doc, &bad).is_err());
    }
}
