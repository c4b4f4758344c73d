//! `metadata.managedFields`: which manager owns which fields of a Lease,
//! kept as kube-apiserver's field manager keeps them (structured-merge-diff,
//! "SMD" below: sigs.k8s.io/structured-merge-diff/v4 merge/update.go, and
//! staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/ in
//! kubernetes/kubernetes).
//!
//! What the Lease schema makes simple: every field of `spec` is a scalar,
//! `metadata.labels` and `metadata.annotations` are maps of strings, so a
//! field set is a set of paths of field names. Lists (`ownerReferences`,
//! `finalizers`) are owned whole here, as atomic leaves, where SMD owns
//! their items (`k:{"uid":..}`, `v:".."`); entries it wrote are kept as
//! they are.

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Map, Value};

/// The only version the server serves.
pub(crate) const API_VERSION: &str = "coordination.k8s.io/v1";

/// A field's path, each step as FieldsV1 spells it: `["f:spec", "f:renewTime"]`.
pub(crate) type FieldPath = Vec<String>;

/// A set of owned fields.
pub(crate) type FieldSet = BTreeSet<FieldPath>;

/// `operation` of a managedFields entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One managedFields entry.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    subresource: String,
    time: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn new(manager: &str, operation: Operation, fields: FieldSet) -> Entry {
        Entry {
            manager: manager.to_owned(),
            operation,
            api_version: API_VERSION.to_owned(),
            subresource: String::new(),
            time: None,
            fields,
        }
    }

    /// Whether this is the entry of `manager` writing with `operation` on
    /// the Lease itself (SMD's manager identifier: manager, operation,
    /// subresource, and the apiVersion for updates; only one version here).
    fn is(&self, manager: &str, operation: Operation) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.is_empty()
    }

    /// The manager as a conflict names it (managedfields/internal/conflict.go,
    /// printManager): `"name"` for an applier, `"name" using <apiVersion>`
    /// for an updater.
    fn describe(&self) -> String {
        let mut text = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            text.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            text.push_str(&format!(" using {}", self.api_version));
        }
        text
    }
}

/// The manager of a write that is not an apply: `?fieldManager=`, or else
/// the User-Agent up to its first `/`, printable characters only, at most
/// 128 bytes (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go,
/// managerOrUserAgent and prefixFromUserAgent).
pub(crate) fn manager_of(params: &HashMap<String, String>, user_agent: &str) -> String {
    if let Some(manager) = params.get("fieldManager").filter(|m| !m.is_empty()) {
        return manager.clone();
    }
    let mut manager = String::new();
    for c in user_agent.split('/').next().unwrap_or_default().chars() {
        if c.is_control() {
            continue;
        }
        if manager.len() + c.len_utf8() > 128 {
            break;
        }
        manager.push(c);
    }
    manager
}

/// Paths no manager owns (managedfields/internal/stripmeta.go).
fn stripped(path: &FieldPath) -> bool {
    const META: [&str; 9] = [
        "f:name",
        "f:namespace",
        "f:creationTimestamp",
        "f:selfLink",
        "f:uid",
        "f:clusterName",
        "f:generation",
        "f:managedFields",
        "f:resourceVersion",
    ];
    match path.as_slice() {
        [] => true,
        [top] => top == "f:apiVersion" || top == "f:kind" || top == "f:metadata",
        [meta, field, ..] => meta == "f:metadata" && META.contains(&field.as_str()),
    }
}

/// Objects that are always there in the typed object (Go structs, which
/// JSON encodes even when empty): never owned as a whole.
fn always_present(path: &[String]) -> bool {
    path.is_empty() || path == ["f:metadata"] || path == ["f:spec"]
}

fn step(key: &str) -> String {
    format!("f:{key}")
}

/// The fields an applied configuration sets: its leaves, and its empty
/// objects and nulls (SMD typed/tofieldset.go).
pub(crate) fn field_set(config: &Value) -> FieldSet {
    fn walk(map: &Map<String, Value>, path: &mut FieldPath, set: &mut FieldSet) {
        for (key, value) in map {
            path.push(step(key));
            match value {
                Value::Object(child) if !child.is_empty() => walk(child, path, set),
                _ => {
                    set.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut set = FieldSet::new();
    if let Some(map) = config.as_object() {
        walk(map, &mut Vec::new(), &mut set);
    }
    set.retain(|p| !stripped(p));
    set
}

/// What changed between two versions of an object (SMD typed/compare.go):
/// fields added or modified, and fields removed.
#[derive(Debug, Default)]
struct Comparison {
    changed: FieldSet,
    removed: FieldSet,
}

/// A value as the typed object holds it: nulls and empty maps are absent
/// (Go's `omitempty`), except the objects that are always there.
fn present<'a>(value: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(Map::is_empty);
    value.filter(|v| always_present(path) || !empty(v))
}

/// Every field of `value` at `path` (with the object itself if it is a map).
fn every_field(value: &Value, path: &mut FieldPath, set: &mut FieldSet) {
    match value {
        Value::Object(map) => {
            if !always_present(path) {
                set.insert(path.clone());
            }
            for (key, child) in map {
                path.push(step(key));
                if let Some(child) = present(Some(child), path) {
                    every_field(child, path, set);
                }
                path.pop();
            }
        }
        _ => {
            set.insert(path.clone());
        }
    }
}

fn diff(old: Option<&Value>, new: Option<&Value>, path: &mut FieldPath, c: &mut Comparison) {
    match (present(old, path), present(new, path)) {
        (None, None) => {}
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                path.push(step(key));
                diff(a.get(key), b.get(key), path, c);
                path.pop();
            }
        }
        (None, Some(v)) => every_field(v, path, &mut c.changed),
        (Some(v), None) => every_field(v, path, &mut c.removed),
        (Some(a), Some(b)) => {
            if a != b {
                c.changed.insert(path.clone());
            }
        }
    }
}

fn compare(old: &Value, new: &Value) -> Comparison {
    let mut c = Comparison::default();
    diff(Some(old), Some(new), &mut Vec::new(), &mut c);
    c.changed.retain(|p| !stripped(p));
    c.removed.retain(|p| !stripped(p));
    c
}

/// The managedFields a write starts from (managedfields/internal/
/// fieldmanager.go, decodeLiveOrNew): `[]` (or one empty entry) in the
/// written object resets them; entries in it replace the stored ones;
/// without any, the stored ones are kept.
pub(crate) fn of_write(live: Option<&Value>, written: &Value) -> Vec<Entry> {
    if let Some(Value::Array(entries)) = written["metadata"].get("managedFields") {
        let reset = entries.is_empty() || (entries.len() == 1 && entries[0] == json!({}));
        if reset {
            return Vec::new();
        }
    }
    let own = decode(written);
    if own.is_empty() {
        live.map(decode).unwrap_or_default()
    } else {
        own
    }
}

/// The managedFields of a stored object.
pub(crate) fn decode(object: &Value) -> Vec<Entry> {
    let Some(entries) = object["metadata"]["managedFields"].as_array() else {
        return Vec::new();
    };
    let text = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_owned();
    entries
        .iter()
        .filter_map(|e| {
            let operation = match e["operation"].as_str()? {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return None,
            };
            let mut fields = FieldSet::new();
            fields_of(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Some(Entry {
                manager: text(e, "manager"),
                operation,
                api_version: text(e, "apiVersion"),
                subresource: text(e, "subresource"),
                time: e["time"].as_str().map(str::to_owned),
                fields,
            })
        })
        .collect()
}

/// The set a FieldsV1 tree holds: `"."` marks its node as a member, an
/// empty object is a member leaf (SMD fieldpath/serialize.go).
fn fields_of(tree: &Value, path: &mut FieldPath, set: &mut FieldSet) {
    let Some(map) = tree.as_object() else { return };
    for (key, child) in map {
        if key == "." {
            set.insert(path.clone());
            continue;
        }
        path.push(key.clone());
        if child.as_object().is_some_and(Map::is_empty) {
            set.insert(path.clone());
        } else {
            fields_of(child, path, set);
        }
        path.pop();
    }
}

/// A set as a FieldsV1 tree.
fn fields_v1(set: &FieldSet) -> Value {
    fn tidy(node: &mut Map<String, Value>) {
        for child in node.values_mut() {
            if let Some(map) = child.as_object_mut() {
                tidy(map);
                if map.len() == 1 && map.contains_key(".") {
                    map.clear();
                }
            }
        }
    }
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for step in path {
            node = node
                .entry(step.clone())
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("a FieldsV1 node");
        }
        node.insert(".".into(), json!({}));
    }
    tidy(&mut root);
    Value::Object(root)
}

/// Writes `entries` into `object`'s metadata, in kube-apiserver's order
/// (operation, time, manager: managedfields/internal/managedfields.go,
/// sortEncodedManagedFields); none at all removes the field.
pub(crate) fn encode(object: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|p, q| {
        let time = |e: &Entry| e.time.clone().unwrap_or_default();
        (
            p.operation.name(),
            time(p),
            &p.manager,
            &p.api_version,
            &p.subresource,
        )
            .cmp(&(
                q.operation.name(),
                time(q),
                &q.manager,
                &q.api_version,
                &q.subresource,
            ))
    });
    let Some(meta) = object["metadata"].as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let encoded = entries
        .iter()
        .map(|e| {
            let mut entry = json!({
                "operation": e.operation.name(),
                "apiVersion": e.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(&e.fields),
            });
            if !e.manager.is_empty() {
                entry["manager"] = json!(e.manager);
            }
            if let Some(time) = &e.time {
                entry["time"] = json!(time);
            }
            if !e.subresource.is_empty() {
                entry["subresource"] = json!(e.subresource);
            }
            entry
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(encoded));
}

/// An Update (create, PUT, or a patch that is not an apply) by `manager`,
/// from `live` to `new` (SMD merge/update.go `Updater.Update`, through
/// managedfields/internal/managedfieldsupdater.go): the fields it added or
/// changed become its own and no one else's, whoever owned them (an update
/// never conflicts); removed fields are no one's. Its entry's time moves
/// only if it changed something.
pub(crate) fn update(
    live: &Value,
    new: &Value,
    mut entries: Vec<Entry>,
    manager: &str,
) -> Vec<Entry> {
    let c = compare(live, new);
    for e in &mut entries {
        e.fields
            .retain(|p| !c.changed.contains(p) && !c.removed.contains(p));
    }
    if !c.changed.is_empty() {
        let now = now();
        match entries
            .iter_mut()
            .find(|e| e.is(manager, Operation::Update))
        {
            Some(e) => {
                e.fields.extend(c.changed);
                e.time = Some(now);
            }
            None => {
                let mut e = Entry::new(manager, Operation::Update, c.changed);
                e.time = Some(now);
                entries.push(e);
            }
        }
    }
    entries.retain(|e| !e.fields.is_empty());
    entries
}

/// A field another manager owns that an apply would change.
#[derive(Debug)]
pub(crate) struct Conflict {
    /// The owner, as kube-apiserver prints it.
    pub(crate) manager: String,
    /// The field, as `.spec.holderIdentity`.
    pub(crate) field: String,
}

/// A path as SMD prints it (fieldpath/pathelement.go): `.name` for a
/// field, `[...]` for list items.
fn display(path: &FieldPath) -> String {
    path.iter()
        .map(|s| match s.split_once(':') {
            Some(("f", name)) => format!(".{name}"),
            Some(("k", key)) => format!("[{key}]"),
            Some(("v", value)) => format!("[={value}]"),
            Some(("i", index)) => format!("[{index}]"),
            _ => format!(".{s}"),
        })
        .collect()
}

/// `config` merged into `live`: objects field by field, anything else
/// replaced; a null removes the field.
fn merge_config(live: &mut Value, config: &Value) {
    let (Some(live), Some(config)) = (live.as_object_mut(), config.as_object()) else {
        *live = config.clone();
        return;
    };
    for (key, value) in config {
        match (live.get_mut(key), value) {
            (_, Value::Null) => {
                live.remove(key);
            }
            (Some(current @ Value::Object(_)), Value::Object(_)) => merge_config(current, value),
            _ => {
                live.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Removes the field at `path` from `object`, and a labels or annotations
/// map that this leaves empty.
fn remove_field(object: &mut Value, path: &FieldPath) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = Some(&mut *object);
    for step in parents {
        node = node.and_then(|n| step.strip_prefix("f:").and_then(|key| n.get_mut(key)));
    }
    if let (Some(map), Some(key)) = (node.and_then(Value::as_object_mut), last.strip_prefix("f:")) {
        map.remove(key);
    }
    if let Some(meta) = object["metadata"].as_object_mut() {
        for map in ["labels", "annotations"] {
            if meta
                .get(map)
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                meta.remove(map);
            }
        }
    }
}

/// An object without what only the server writes, to tell whether a write
/// changed anything.
pub(crate) fn content(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    object
}

/// A server-side apply of `config` by `manager` to `live` (SMD merge/
/// update.go `Updater.Apply`): the applied configuration is merged in and
/// becomes the manager's whole field set; fields it applied before and
/// leaves out now are removed unless another manager owns them (prune);
/// a field another manager owns that the merge changes is a conflict,
/// unless `force`, which takes it over; one it sets to the value already
/// there is shared. Returns the new object and entries, or the conflicts.
pub(crate) fn apply(
    live: &Value,
    config: &Value,
    mut entries: Vec<Entry>,
    manager: &str,
    force: bool,
) -> Result<(Value, Vec<Entry>), Vec<Conflict>> {
    let mut merged = live.clone();
    merge_config(&mut merged, config);
    let set = field_set(config);
    let last = match entries.iter_mut().find(|e| e.is(manager, Operation::Apply)) {
        Some(e) => std::mem::replace(&mut e.fields, set.clone()),
        None => {
            entries.push(Entry::new(manager, Operation::Apply, set.clone()));
            FieldSet::new()
        }
    };
    let owned = |path: &FieldPath| {
        entries
            .iter()
            .any(|e| e.fields.iter().any(|p| p.starts_with(path)))
    };
    let dropped: Vec<&FieldPath> = last.difference(&set).filter(|p| !owned(p)).collect();
    for path in dropped {
        remove_field(&mut merged, path);
    }
    let c = compare(live, &merged);
    let mut conflicts: Vec<Conflict> = Vec::new();
    for e in entries.iter().filter(|e| !e.is(manager, Operation::Apply)) {
        for path in e.fields.intersection(&c.changed) {
            conflicts.push(Conflict {
                manager: e.describe(),
                field: display(path),
            });
        }
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort_by(|a, b| (&a.manager, &a.field).cmp(&(&b.manager, &b.field)));
        return Err(conflicts);
    }
    let changed = content(live) != content(&merged);
    for e in &mut entries {
        if e.is(manager, Operation::Apply) {
            // managedfieldsupdater.go: the applier's time moves only if
            // the object changed.
            if changed {
                e.time = Some(now());
            }
        } else {
            e.fields
                .retain(|p| !c.changed.contains(p) && !c.removed.contains(p));
        }
    }
    entries.retain(|e| !e.fields.is_empty());
    Ok((merged, entries))
}

/// Now, as metav1.Time writes it (RFC 3339, UTC, whole seconds).
pub(crate) fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_v1_round_trips_and_marks_maps_added_by_an_update() {
        let live = json!({ "metadata": { "name": "a" }, "spec": {} });
        let new = json!({
            "metadata": { "name": "a", "labels": { "x": "1" } },
            "spec": { "holderIdentity": "h" },
        });
        let entries = update(&live, &new, Vec::new(), "m");
        let mut object = new.clone();
        encode(&mut object, entries);
        let v1 = &object["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(
            *v1,
            json!({
                "f:metadata": { "f:labels": { ".": {}, "f:x": {} } },
                "f:spec": { "f:holderIdentity": {} },
            })
        );
        let mut again = FieldSet::new();
        fields_of(v1, &mut Vec::new(), &mut again);
        assert_eq!(again, decode(&object)[0].fields);
    }

    #[test]
    fn now_is_rfc3339() {
        let now = now();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
    }
}
