// Package docs holds no code: its tests keep the documentation and the tree
// true to each other. TestRuleCitations fails when code, a doc or a golden
// script cites "rule N" and docs/design.md has no rule N; TestLeanBinary when
// cmd/leasehold links what the package table says it does not.
package docs
