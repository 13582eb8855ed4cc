// The parts of KServe's CRDs (serving.kserve.io) that infera's manifests use,
// written from KServe's API reference (v0.14: ServingRuntime /
// ClusterServingRuntime v1alpha1, InferenceService v1beta1). Fields not
// listed here are rejected as unknown: add them (with their KServe types)
// when a manifest needs them. Pod and container fields reuse Kubernetes'
// own types from kubernetes-models.
import type { IObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";
import type { IContainer } from "kubernetes-models/v1/Container";
import type { IPodSpec } from "kubernetes-models/v1/PodSpec";
import type { IResourceRequirements } from "kubernetes-models/v1/ResourceRequirements";
import type { IEnvVar } from "kubernetes-models/v1/EnvVar";

export interface SupportedModelFormat {
  name: string;
  version?: string;
  autoSelect?: boolean;
  priority?: number;
}

type ProtocolVersion = "v1" | "v2" | "grpc-v1" | "grpc-v2";

// ServingRuntimeSpec: the pod fields KServe copies onto predictor pods.
export interface ServingRuntimeSpec extends Partial<Pick<IPodSpec,
    "volumes" | "nodeSelector" | "affinity" | "tolerations" | "imagePullSecrets" | "hostIPC">> {
  supportedModelFormats?: SupportedModelFormat[];
  multiModel?: boolean;
  disabled?: boolean;
  protocolVersions?: ProtocolVersion[];
  containers: IContainer[];
  annotations?: { [key: string]: string };
  labels?: { [key: string]: string };
  grpcEndpoint?: string;
  grpcDataEndpoint?: string;
  httpDataEndpoint?: string;
  replicas?: number;
  storageHelper?: { disabled?: boolean };
}

export interface ClusterServingRuntime {
  apiVersion: "serving.kserve.io/v1alpha1";
  kind: "ClusterServingRuntime";
  metadata: IObjectMeta;
  spec: ServingRuntimeSpec;
}

export interface ServingRuntime {
  apiVersion: "serving.kserve.io/v1alpha1";
  kind: "ServingRuntime";
  metadata: IObjectMeta;
  spec: ServingRuntimeSpec;
}

// ModelSpec: a container (name optional) plus the model's format and source.
export interface ModelSpec extends Partial<IContainer> {
  modelFormat: { name: string; version?: string };
  runtime?: string;
  storageUri?: string;
  protocolVersion?: ProtocolVersion;
  resources?: IResourceRequirements;
  env?: IEnvVar[];
}

// ComponentExtensionSpec fields, and the predictor's pod fields.
export interface PredictorSpec extends Partial<IPodSpec> {
  model?: ModelSpec;
  minReplicas?: number;
  maxReplicas?: number;
  scaleTarget?: number;
  scaleMetric?: "cpu" | "memory" | "concurrency" | "rps";
  containerConcurrency?: number;
  timeout?: number;
  canaryTrafficPercent?: number;
  labels?: { [key: string]: string };
  annotations?: { [key: string]: string };
  deploymentStrategy?: { type?: "RollingUpdate" | "Recreate" };
}

export interface InferenceService {
  apiVersion: "serving.kserve.io/v1beta1";
  kind: "InferenceService";
  metadata: IObjectMeta;
  spec: { predictor: PredictorSpec };
}
