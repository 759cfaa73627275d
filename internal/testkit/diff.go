package testkit

// AWSKeyDiff is a unified diff that adds an AWS access key id on line 4 of
// config.go: the rules provider finds exactly one finding in it, an error
// of category security whose evidence is the key. The review tests of the
// HTTP API and of the dashboard submit it, so that what one finds the
// other's assertions can rely on.
const AWSKeyDiff = `diff --git a/config.go b/config.go
--- a/config.go
+++ b/config.go
@@ -1,3 +1,4 @@
 package config
 
 const region = "us-east-1"
+const awsKeyID = "AKIAQWERTYUIOPASDFGH"
`
