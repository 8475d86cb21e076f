//! The watched objects decoded with only the fields the signals read ([`Slim`]): a Pod, a
//! CronJob, a DaemonSet or a ReplicaSet arrives as its name, namespace, resourceVersion,
//! controller reference, the one annotation read (the Deployment revision) and its pod spec's
//! image names, pull Secrets and node; every other field (status, managedFields, labels,
//! probes, env, resources) is stepped over by the JSON reader, never built. A list page of 100
//! pods and every event of a busy cluster's status churn then costs a parse, not a hundred
//! allocations per object, and the k8s-openapi decoders of the whole types are never run (nor
//! paged in).
//!
//! Invariants: a `Slim<K>` holds a `K` whose read fields are exactly what `K`'s own decoder
//! would give (a test decodes one JSON object both ways and compares every signal read of it);
//! the fields not read are left at their defaults; missing or `null` fields decode as
//! k8s-openapi decodes them (defaults), so a `Slim` refuses no object the full type accepts.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Container, EphemeralContainer, ImageVolumeSource, LocalObjectReference, Pod, PodSpec,
    PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::runtime::watcher::Event;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, de::DeserializeOwned};

/// The annotation holding a ReplicaSet's revision of its Deployment: the one annotation the
/// watches read (here, below the watches that read it, so that this file imports none of them).
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// A watched object of kind `K` holding only the fields the signals read (see the module).
#[derive(Clone, Debug, Default)]
pub struct Slim<K>(pub K);

/// A kind the watches decode slim: its wire shape (the read fields) and how that becomes `K`.
pub trait SlimKind: Sized {
    /// The fields read, as they come on the wire.
    type Wire: DeserializeOwned;
    /// The object holding them (every other field at its default).
    fn from_wire(wire: Self::Wire) -> Self;
}

impl<'de, K: SlimKind> Deserialize<'de> for Slim<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::Wire::deserialize(deserializer).map(|wire| Slim(K::from_wire(wire)))
    }
}

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for Slim<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::Metadata<Ty = ObjectMeta>> k8s_openapi::Metadata for Slim<K> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        self.0.metadata()
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        self.0.metadata_mut()
    }
}

/// The watch event of the object inside.
pub fn unslim<K>(event: Event<Slim<K>>) -> Event<K> {
    match event {
        Event::Apply(Slim(k)) => Event::Apply(k),
        Event::Delete(Slim(k)) => Event::Delete(k),
        Event::Init => Event::Init,
        Event::InitApply(Slim(k)) => Event::InitApply(k),
        Event::InitDone => Event::InitDone,
    }
}

/// An annotation's key: the one read, or another (compared where it lies, never copied).
enum AnnotationKey {
    Revision,
    Other,
}

impl<'de> Deserialize<'de> for AnnotationKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = AnnotationKey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an annotation's key")
            }
            fn visit_str<E>(self, key: &str) -> Result<AnnotationKey, E> {
                Ok(if key == REVISION_ANNOTATION {
                    AnnotationKey::Revision
                } else {
                    AnnotationKey::Other
                })
            }
        }
        deserializer.deserialize_str(Key)
    }
}

/// The annotations read (only [`REVISION_ANNOTATION`]; any other's value is stepped over).
#[derive(Default)]
struct ReadAnnotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for ReadAnnotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = ReadAnnotations;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_unit<E>(self) -> Result<ReadAnnotations, E> {
                Ok(ReadAnnotations::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReadAnnotations, A::Error> {
                let mut read = BTreeMap::new();
                while let Some(key) = map.next_key::<AnnotationKey>()? {
                    match key {
                        AnnotationKey::Revision => {
                            let value: Option<String> = map.next_value()?;
                            read.insert(REVISION_ANNOTATION.to_owned(), value.unwrap_or_default());
                        }
                        AnnotationKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(ReadAnnotations(read))
            }
        }
        deserializer.deserialize_any(Read)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerWire {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    controller: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct MetaWire {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    owner_references: Option<Vec<OwnerWire>>,
    annotations: Option<ReadAnnotations>,
}

impl MetaWire {
    fn meta(self) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            resource_version: self.resource_version,
            owner_references: self.owner_references.map(|owners| {
                owners
                    .into_iter()
                    .map(|o| OwnerReference {
                        api_version: o.api_version,
                        kind: o.kind,
                        name: o.name,
                        controller: o.controller,
                        ..OwnerReference::default()
                    })
                    .collect()
            }),
            annotations: self.annotations.map(|a| a.0),
            ..ObjectMeta::default()
        }
    }
}

#[derive(Deserialize)]
struct ImageWire {
    image: Option<String>,
}

#[derive(Deserialize)]
struct VolumeImageWire {
    reference: Option<String>,
}

#[derive(Deserialize)]
struct VolumeWire {
    image: Option<VolumeImageWire>,
}

#[derive(Deserialize)]
struct NameWire {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpecWire {
    init_containers: Option<Vec<ImageWire>>,
    containers: Option<Vec<ImageWire>>,
    ephemeral_containers: Option<Vec<ImageWire>>,
    volumes: Option<Vec<VolumeWire>>,
    image_pull_secrets: Option<Vec<NameWire>>,
    node_name: Option<String>,
    node_selector: Option<BTreeMap<String, String>>,
}

impl PodSpecWire {
    fn spec(self) -> PodSpec {
        let container = |c: ImageWire| Container {
            image: c.image,
            ..Container::default()
        };
        PodSpec {
            init_containers: self
                .init_containers
                .map(|cs| cs.into_iter().map(container).collect()),
            containers: self
                .containers
                .unwrap_or_default()
                .into_iter()
                .map(container)
                .collect(),
            ephemeral_containers: self.ephemeral_containers.map(|cs| {
                cs.into_iter()
                    .map(|c| EphemeralContainer {
                        image: c.image,
                        ..EphemeralContainer::default()
                    })
                    .collect()
            }),
            volumes: self.volumes.map(|vs| {
                vs.into_iter()
                    .map(|v| Volume {
                        image: v.image.map(|i| ImageVolumeSource {
                            reference: i.reference,
                            ..ImageVolumeSource::default()
                        }),
                        ..Volume::default()
                    })
                    .collect()
            }),
            image_pull_secrets: self.image_pull_secrets.map(|rs| {
                rs.into_iter()
                    .map(|r| LocalObjectReference {
                        name: r.name.unwrap_or_default(),
                    })
                    .collect()
            }),
            node_name: self.node_name,
            node_selector: self.node_selector,
            ..PodSpec::default()
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TemplateWire {
    spec: Option<PodSpecWire>,
}

impl TemplateWire {
    fn template(self) -> PodTemplateSpec {
        PodTemplateSpec {
            spec: self.spec.map(PodSpecWire::spec),
            ..PodTemplateSpec::default()
        }
    }
}

/// An object on the wire: its metadata and its spec (`S`, absent or `null` at its default).
#[derive(Deserialize)]
pub struct ObjectWire<S> {
    #[serde(default)]
    metadata: MetaWire,
    #[serde(default)]
    spec: S,
}

impl SlimKind for Pod {
    type Wire = ObjectWire<Option<PodSpecWire>>;
    fn from_wire(wire: Self::Wire) -> Pod {
        Pod {
            metadata: wire.metadata.meta(),
            spec: wire.spec.map(PodSpecWire::spec),
            ..Pod::default()
        }
    }
}

/// A Job's or a DaemonSet's spec: its pod template.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TemplatedSpecWire {
    template: TemplateWire,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JobTemplateWire {
    spec: Option<TemplatedSpecWire>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct CronJobSpecWire {
    schedule: String,
    time_zone: Option<String>,
    suspend: Option<bool>,
    job_template: JobTemplateWire,
}

impl SlimKind for CronJob {
    type Wire = ObjectWire<CronJobSpecWire>;
    fn from_wire(wire: Self::Wire) -> CronJob {
        let spec = wire.spec;
        CronJob {
            metadata: wire.metadata.meta(),
            spec: CronJobSpec {
                schedule: spec.schedule,
                time_zone: spec.time_zone,
                suspend: spec.suspend,
                job_template: JobTemplateSpec {
                    spec: spec.job_template.spec.map(|job| JobSpec {
                        template: job.template.template(),
                        ..JobSpec::default()
                    }),
                    ..JobTemplateSpec::default()
                },
                ..CronJobSpec::default()
            },
            ..CronJob::default()
        }
    }
}

impl SlimKind for DaemonSet {
    type Wire = ObjectWire<TemplatedSpecWire>;
    fn from_wire(wire: Self::Wire) -> DaemonSet {
        DaemonSet {
            metadata: wire.metadata.meta(),
            spec: DaemonSetSpec {
                template: wire.spec.template.template(),
                ..DaemonSetSpec::default()
            },
            ..DaemonSet::default()
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ReplicaSetSpecWire {
    template: Option<TemplateWire>,
}

impl SlimKind for ReplicaSet {
    type Wire = ObjectWire<ReplicaSetSpecWire>;
    fn from_wire(wire: Self::Wire) -> ReplicaSet {
        ReplicaSet {
            metadata: wire.metadata.meta(),
            spec: ReplicaSetSpec {
                template: wire.spec.template.map(TemplateWire::template),
                ..ReplicaSetSpec::default()
            },
            ..ReplicaSet::default()
        }
    }
}

#[cfg(test)]
#[path = "slim_tests.rs"]
mod tests;
