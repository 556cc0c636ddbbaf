-- +goose Up
-- The releases schema starts empty; its tables come with its handlers.
SELECT 1;

-- +goose Down
SELECT 1;
