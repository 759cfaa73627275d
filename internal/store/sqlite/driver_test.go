package sqlite

// The tests that damage or inspect a store's file open it with a connection
// of their own, under the default driver's name "sqlite", whichever driver
// the store itself was built with (the file format is the same).
import _ "modernc.org/sqlite"
