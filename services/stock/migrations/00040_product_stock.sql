-- Inventory (docs/architecture.md, rule 6): a product with a row here is tracked; its
-- reservations never hold more than it has on hand. A product without a row is untracked
-- and always reservable. `reserved` is the sum of the held reservations marked `tracked`
-- (the product had its row when the line was reserved), kept on the row so that the
-- decision on a placed order reads and locks one row per product. Quantities are exact
-- decimals with three fraction digits, as the order lines.

-- +goose Up
CREATE TABLE product_stock (
    product_id uuid          PRIMARY KEY,
    on_hand    numeric(12,3) NOT NULL CHECK (on_hand >= 0),
    reserved   numeric(12,3) NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    updated_at timestamptz   NOT NULL DEFAULT now(),
    -- A second guard besides the row lock of the decision: never oversold.
    CONSTRAINT product_stock_not_oversold CHECK (reserved <= on_hand)
);

ALTER TABLE reservation ADD COLUMN tracked boolean NOT NULL DEFAULT false;

GRANT SELECT, INSERT, UPDATE ON product_stock TO stock_app;

-- +goose Down
ALTER TABLE reservation DROP COLUMN tracked;
DROP TABLE product_stock;
