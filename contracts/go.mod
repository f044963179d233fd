module example.com/shop/contracts

go 1.26

require (
	github.com/google/uuid v1.6.0
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1
)

require go.yaml.in/yaml/v3 v3.0.6
