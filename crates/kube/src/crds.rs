//! The CustomResourceDefinitions of Flotilla's own kinds, `Fleet`, `FleetRollout`,
//! `FleetCommand` and `FleetRolloutRecord` in `flotilla.dev/v1alpha1` (`flotilla crds`), their schemas generated from the core's spec types
//! with schemars and made structural as the API server requires (kube's rewriter, the one
//! `#[derive(CustomResource)]` uses). Argo's kinds are never generated here: their CRDs come from
//! Argo's release, and a narrower schema applied over them would prune fields of every stored
//! Rollout.

use flotilla_core::spec::fleet::{FleetRolloutSpec, FleetSpec};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

/// The API group of Flotilla's kinds.
pub const GROUP: &str = "flotilla.dev";
/// Their version.
pub const VERSION: &str = "v1alpha1";

/// The structural OpenAPI v3 schema of `T`, inlined (no `$ref`), as a CRD holds it.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(kube_core::schema::StructuralSchemaRewriter)
        .with_transform(kube_core::schema::OptionalEnum)
        .with_transform(kube_core::schema::OptionalIntOrString)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    tidy(&mut schema);
    schema
}

/// What a CRD's schema may not hold: `title`, `$schema` and `additionalProperties: false`
/// (serde's `deny_unknown_fields`; the API server rejects properties and additionalProperties
/// together; unknown fields are pruned, or refused with strict field validation), and
/// `format` values Kubernetes does not know (`uint32`).
fn tidy(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("title");
            map.remove("$schema");
            if map.get("additionalProperties") == Some(&Value::Bool(false)) {
                map.remove("additionalProperties");
            }
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !matches!(f, "int32" | "int64" | "float" | "double" | "date-time"))
            {
                map.remove("format");
            }
            for value in map.values_mut() {
                tidy(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}

/// One kind's CRD: namespaced, served and stored at `v1alpha1`, `spec` required; with
/// `status`, a status subresource whose content Flotilla writes (a summary, schema-free).
fn crd(kind: &str, plural: &str, short: &str, spec: Value, columns: Value, status: bool) -> Value {
    let singular = kind.to_lowercase();
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": singular,
                "shortNames": [short],
                "categories": ["flotilla"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": format!("A {kind} of Flotilla (see docs/fleet-spec.md)."),
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                    },
                }},
            }],
        },
    });
    if status {
        let version = &mut crd["spec"]["versions"][0];
        version["subresources"] = json!({"status": {}});
        version["schema"]["openAPIV3Schema"]["properties"]["status"] = json!({
            "type": "object",
            "description": "The fleet's progress as Flotilla's hub controller writes it: a bounded summary (see docs/kubernetes.md).",
            "x-kubernetes-preserve-unknown-fields": true,
        });
    }
    crd
}

/// The CRDs of `Fleet` and `FleetRollout`, and of what Flotilla keeps in a hub: `FleetCommand`
/// (an operator's command) and `FleetRolloutRecord` (the controller's state).
pub fn crds() -> Vec<Value> {
    vec![
        crd(
            "Fleet",
            "fleets",
            "flt",
            schema_of::<FleetSpec>(),
            json!([
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ]),
            false,
        ),
        crd(
            "FleetRollout",
            "fleetrollouts",
            "flro",
            schema_of::<FleetRolloutSpec>(),
            json!([
                {"name": "Fleet", "type": "string", "jsonPath": ".spec.fleet"},
                {"name": "Rollout", "type": "string", "jsonPath": ".spec.rollout"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Wave", "type": "string", "jsonPath": ".status.wave"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ]),
            true,
        ),
        crd(
            "FleetCommand",
            "fleetcommands",
            "flcmd",
            json!({
                "type": "object",
                "description": "An operator's command to a FleetRollout, consumed exactly once by Flotilla (its uid is recorded with the tick that applies it); its status says when.",
                "required": ["fleetRollout", "command"],
                "properties": {
                    "fleetRollout": {"type": "string", "description": "The FleetRollout, in this namespace."},
                    "command": {
                        "type": "object",
                        "description": "The command as the HTTP API takes it: {command: promote|abort|retry|pause|resume|undo|setImage, ...}.",
                        "x-kubernetes-preserve-unknown-fields": true,
                    },
                    "operator": {"type": "string", "description": "Who sent it."},
                },
            }),
            json!([
                {"name": "FleetRollout", "type": "string", "jsonPath": ".spec.fleetRollout"},
                {"name": "Command", "type": "string", "jsonPath": ".spec.command.command"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ]),
            true,
        ),
        crd(
            "FleetRolloutRecord",
            "fleetrolloutrecords",
            "flrec",
            json!({
                "type": "object",
                "description": "Flotilla's own state of a FleetRollout (one object for the fleet, one per cluster): written by the controller only, never by Git or a person.",
                "x-kubernetes-preserve-unknown-fields": true,
            }),
            json!([
                {"name": "Part", "type": "string", "jsonPath": ".metadata.labels.flotilla\\.dev/record"},
                {"name": "Generation", "type": "integer", "jsonPath": ".spec.generation"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ]),
            false,
        ),
    ]
}

/// The CRDs as YAML documents, ready for `kubectl apply -f -`.
pub fn yaml() -> String {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).expect("a JSON value serializes as YAML"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every object of a schema says its type (or is an int-or-string), and nothing is a `$ref`:
    /// what the API server's structural-schema check asks.
    fn structural(schema: &Value, path: &str, problems: &mut Vec<String>) {
        let Some(map) = schema.as_object() else {
            return;
        };
        if map.contains_key("$ref") || map.contains_key("definitions") || map.contains_key("$defs")
        {
            problems.push(format!("{path}: a reference"));
        }
        let typed = map.contains_key("type")
            || map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            || map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if !typed && !path.ends_with("]") {
            problems.push(format!("{path}: no type"));
        }
        for (key, value) in map {
            match key.as_str() {
                "properties" => {
                    for (name, property) in value.as_object().into_iter().flatten() {
                        structural(property, &format!("{path}.{name}"), problems);
                    }
                }
                "items" | "additionalProperties" => {
                    structural(value, &format!("{path}{key}"), problems)
                }
                _ => {}
            }
        }
    }

    #[test]
    fn the_schemas_are_structural_and_name_every_field() {
        for crd in crds() {
            let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            let mut problems = Vec::new();
            structural(schema, "", &mut problems);
            assert!(
                problems.is_empty(),
                "{}: {problems:#?}",
                crd["metadata"]["name"]
            );
        }
        let fleet_rollout =
            &crds()[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let properties = fleet_rollout["properties"].as_object().unwrap();
        for field in [
            "fleet",
            "rollout",
            "waves",
            "bakeTime",
            "waveAnalysis",
            "clusterOverrides",
            "failurePolicy",
            "onNewRevision",
            "rolloutSource",
        ] {
            assert!(
                properties.contains_key(field),
                "{field} missing: {properties:#?}"
            );
        }
        assert_eq!(
            fleet_rollout["required"],
            json!(["fleet", "rollout", "waves"])
        );
        let steps = &properties["waves"]["properties"]["steps"]["items"]["properties"];
        assert_eq!(steps["maxUpdate"]["x-kubernetes-int-or-string"], true);
        assert_eq!(
            properties["rolloutSource"]["enum"],
            json!(["cluster", "flotilla"]),
            "{:#}",
            properties["rolloutSource"]
        );
    }

    #[test]
    fn the_yaml_holds_every_crd() {
        let text = yaml();
        assert_eq!(
            text.matches("kind: CustomResourceDefinition").count(),
            4,
            "{text}"
        );
        assert!(text.contains("name: fleets.flotilla.dev"));
        assert!(text.contains("name: fleetrollouts.flotilla.dev"));
        assert!(text.contains("name: fleetcommands.flotilla.dev"));
        assert!(text.contains("name: fleetrolloutrecords.flotilla.dev"));
    }
}
