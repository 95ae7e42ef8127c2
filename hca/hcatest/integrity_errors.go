package hcatest

// integrityErrorScenarios are signature errors, their reporting, and
// misuse of the integrity API.
var integrityErrorScenarios = []scenario{}
