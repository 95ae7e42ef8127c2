package hcatest

// integrityRecipeScenarios are the integrity offload recipes (NVMe-oF,
// iSER): PI inserted, stripped, passed and translated by the HCA.
var integrityRecipeScenarios = []scenario{}
