// A module without a model function.
module {
}
