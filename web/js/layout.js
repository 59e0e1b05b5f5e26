// The artifact files by role: the JavaScript spelling of pytrain/base/layout.py's ARTIFACT_FILES
// (tests/web/test_layout_names.py checks the two are equal; keep this object literal valid JSON).
export const ARTIFACT_FILES = Object.freeze({
  "training": "training_model.onnx",
  "eval": "eval_model.onnx",
  "optimizer": "optimizer_model.onnx",
  "checkpoint": "checkpoint"
});
