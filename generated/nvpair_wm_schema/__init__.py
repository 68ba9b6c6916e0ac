# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.
